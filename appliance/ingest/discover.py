"""Roots -> the files that belong to the corpus, and path containment.

Containment is decided on real paths (symlinks resolved): a path is inside the
corpus only when its target lies under some root. Scanning skips escaping links
silently; naming one directly is an error. Git-ignored files are asked of git
itself when a root is a git work tree; `.indexignore` adds gitignore-style rules.
"""
from __future__ import annotations

import errno
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pathspec

from appliance.errors import InvalidArgument, NotFound, PathOutsideRoots

INDEXIGNORE = ".indexignore"
MAX_DEPTH = 256
"""Directory nesting scanned at most; deeper trees are reported, not recursed into."""


@dataclass(frozen=True)
class FoundFile:
    """A file under a root: the path we index it as, its root, and its stat."""

    path: Path
    root: Path
    size: int
    mtime_ns: int

    @property
    def display(self) -> str:
        return self.path.relative_to(self.root).as_posix()


@dataclass(frozen=True)
class Skipped:
    """A path the scan saw but will not index, and why."""

    path: Path
    reason: str
    code: str


def is_hidden_or_lock(name: str) -> bool:
    """Dot-files and Office lock files (`~$report.docx`) are never documents."""
    return name.startswith(".") or name.startswith("~$")


def contained_root(real: Path, roots: Sequence[Path]) -> Path | None:
    """The root that contains the real path `real`, or None."""
    for root in roots:
        if real == root or real.is_relative_to(root):
            return root
    return None


def resolve_in_roots(path: str | Path, roots: Sequence[Path], *, cwd: Path | None = None,
                     require_absolute: bool = False, must_exist: bool = True) -> tuple[Path, Path]:
    """(the path as it will be indexed, its root) for a user-named path.

    The indexed path keeps symlinks (a link inside a root is indexed under its
    own name) but is normalised; its real target must be inside a root.
    Raises InvalidArgument, PathOutsideRoots or NotFound.
    """
    text = str(path)
    if not text.strip() or "\x00" in text:
        raise InvalidArgument("A file path must be a non-empty string without NUL bytes")
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        if require_absolute:
            raise InvalidArgument(f"File paths must be absolute: {text!r}",
                                  hint="Give the full path, starting with /.")
        candidate = (cwd or Path.cwd()) / candidate
    candidate = Path(os.path.normpath(candidate))
    try:
        real = candidate.resolve()
    except RuntimeError:  # pathlib's report of ELOOP
        raise InvalidArgument(f"Cannot resolve {candidate}: symbolic links form a loop") from None
    if contained_root(real, roots) is None:
        raise PathOutsideRoots(f"Path outside the configured document roots: {candidate}")
    try:
        exists = candidate.exists()
    except OSError as exc:  # ENAMETOOLONG and friends, which exists() does not swallow
        raise InvalidArgument(f"Cannot use the path {printable(candidate)[:300]}: {exc.strerror or exc}") from None
    if must_exist and not exists:
        raise NotFound(f"No such file: {candidate}", hint="Check the path; `minirag list` shows what is under the roots.")
    # A link inside a root is indexed under its own name; a path that reaches a
    # root through an outside link is indexed under its target.
    lexical_root = contained_root(candidate, roots)
    if lexical_root is not None:
        return candidate, lexical_root
    return real, contained_root(real, roots)  # type: ignore[return-value]


class IgnoreRules:
    """What a root excludes: git's ignore rules (when a work tree) and `.indexignore`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._spec = None
        rules = root / INDEXIGNORE
        if rules.is_file():
            lines = rules.read_text("utf-8", errors="replace").splitlines()
            self._spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self._git_ignored = _git_ignored(root)

    def ignores(self, path: Path, is_dir: bool = False) -> str | None:
        """The rule that excludes `path` ("gitignore" or ".indexignore"), else None."""
        if not self._git_ignored and self._spec is None:
            return None
        rel = path.relative_to(self.root).as_posix()
        probe = rel + "/" if is_dir else rel
        if self._git_ignored is not None and (probe in self._git_ignored or _under_any(rel, self._git_ignored)):
            return "gitignore"
        if self._spec is not None and self._spec.match_file(probe):
            return INDEXIGNORE
        return None


def printable(path: Path) -> str:
    """A path as text that JSON and terminals accept: undecodable bytes become \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _under_any(rel: str, ignored: set[str]) -> bool:
    parts = rel.split("/")
    return any("/".join(parts[:i]) + "/" in ignored for i in range(1, len(parts)))


def _git_ignored(root: Path) -> set[str] | None:
    """Paths (relative to root; directories end in /) that git ignores, or None outside git."""
    try:
        inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                                capture_output=True, text=True, timeout=30)
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard",
             "--directory", "--no-empty-directory", "-z", "--", "."],
            capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    prefix = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-prefix"],
                            capture_output=True, text=True, timeout=30).stdout.strip()
    out = set()
    for item in listed.stdout.split(b"\0"):
        if item:
            rel = os.fsdecode(item)
            out.add(rel[len(prefix):] if prefix and rel.startswith(prefix) else rel)
    return out


def walk(roots: Sequence[Path], extensions: frozenset[str], *, under: Path | None = None,
         report_skips: bool = False) -> Iterator[FoundFile | Skipped]:
    """Every candidate file under the roots (or under `under`), in a stable order.

    Yields Skipped entries for unreadable directories and files, and (with
    `report_skips`) for files excluded by rules, so callers can account for
    every path they saw.
    """
    for root in roots:
        if under is not None and not (under == root or under.is_relative_to(root) or root.is_relative_to(under)):
            continue
        rules = IgnoreRules(root)
        start = under if under is not None and under.is_relative_to(root) else root
        seen_dirs: set[tuple[int, int]] = set()
        yield from _walk_dir(start, root, roots, extensions, rules, seen_dirs, report_skips)


def _walk_dir(directory: Path, root: Path, roots: Sequence[Path], extensions: frozenset[str],
              rules: IgnoreRules, seen_dirs: set[tuple[int, int]], report_skips: bool, depth: int = 0
              ) -> Iterator[FoundFile | Skipped]:
    if depth > MAX_DEPTH:
        yield Skipped(directory, f"nested deeper than {MAX_DEPTH} directories; not scanned", "too_deep")
        return
    try:
        st = directory.stat()
        if (st.st_dev, st.st_ino) in seen_dirs:
            return  # a symlink loop or a second link to a directory already walked
        seen_dirs.add((st.st_dev, st.st_ino))
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except PermissionError as exc:
        yield Skipped(directory, f"directory is not readable: {exc.strerror}", "unreadable")
        return
    except OSError as exc:
        yield Skipped(directory, f"cannot list directory: {exc.strerror or exc}", "unreadable")
        return
    for entry in entries:
        path = Path(entry.path)
        if is_hidden_or_lock(entry.name):
            continue
        if not _utf8(entry.name):
            # Undecodable bytes cannot be stored, cited or typed back by a client.
            yield Skipped(path, "the file name is not valid UTF-8; rename the file", "invalid_name")
            continue
        try:
            is_link = entry.is_symlink()
            info = os.stat(path) if is_link else entry.stat(follow_symlinks=False)
        except OSError as exc:
            # A link named like a document that leads nowhere (or in a circle) is reported even
            # without report_skips, so a sync accounts for it; its old content is still removed.
            if report_skips or path.suffix.lower() in extensions:
                loop = exc.errno == errno.ELOOP
                yield Skipped(path, "symbolic links form a loop" if loop else "broken symbolic link or vanished file",
                              "broken_link")
            continue
        if is_link and contained_root(path.resolve(), roots) is None:
            continue  # escapes every root: not part of the corpus, silently
        if stat.S_ISDIR(info.st_mode):
            rule = rules.ignores(path, is_dir=True)
            if rule:
                if report_skips:
                    yield Skipped(path, f"ignored by {rule}", "ignored")
                continue
            yield from _walk_dir(path, root, roots, extensions, rules, seen_dirs, report_skips, depth + 1)
        elif stat.S_ISREG(info.st_mode):
            if path.suffix.lower() not in extensions:
                continue
            rule = rules.ignores(path)
            if rule:
                if report_skips:
                    yield Skipped(path, f"ignored by {rule}", "ignored")
                continue
            if not os.access(path, os.R_OK):
                yield Skipped(path, "permission denied", "unreadable")
                continue
            yield FoundFile(path, root, info.st_size, info.st_mtime_ns)
