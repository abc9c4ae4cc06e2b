"""Roots -> the files that belong to the corpus, and path containment.

Containment is decided on real paths (symlinks resolved): a path is inside the
corpus only when its target lies under some root. Scanning skips escaping links
silently; naming one directly is an error.

Ignore rules are computed here with `pathspec`, never by asking a `git` binary,
so they hold in the image (no git) and for a repository owned by another user
(which git refuses as "dubious ownership"):

- every `.gitignore` in the tree, each relative to its own directory; for a path
  the deepest file that matches it decides, and within a file the last matching
  line, so `!pattern` re-includes. An ignored directory is not entered at all,
  so nothing below it can be re-included (git's rule);
- `.gitignore` files are honoured whether or not the folder is a git repository:
  a rules file dropped into a plain folder means what it says. When a root is
  the work tree of a repository, or lies inside one, that repository's
  `info/exclude` applies too (weakest), and so do the `.gitignore` files of the
  directories between the work tree's top and the root. A repository nested
  inside a root adds its own `info/exclude` for its files. The user's global
  git configuration (`core.excludesFile`) is not read;
- `.indexignore` at a root adds gitignore-style rules of the appliance's own; it
  can only exclude more, never re-include what git's rules exclude;
- a root the user named is indexed even when the enclosing repository ignores
  it or a folder above it (`build/` with the root at `build/docs`): then that
  repository's rules are set aside for the root, which walk reports as a
  `rules_set_aside` entry; rules files inside the root apply as always.

A rules file that is there but cannot be used (unreadable, a directory, a link
that leads nowhere, not UTF-8, a pattern pathspec rejects) is not passed over as
if it said nothing: the directory it governs (the whole root for `.indexignore`
and `info/exclude`) is skipped with the code `ignore_rules_unreadable`, naming the
file, and `ignore_problems()` lists such directories for `status`.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from appliance.errors import Hint, InvalidArgument, NextAction, NotFound, PathOutsideRoots

GITIGNORE = ".gitignore"
INDEXIGNORE = ".indexignore"
RULES_UNREADABLE = "ignore_rules_unreadable"
RULES_SET_ASIDE = "rules_set_aside"
"""Not a skip: the enclosing repository's rules that would ignore a named root, set aside (walk yields it
as a Skipped entry for the root so a sync can report it)."""
UNSUPPORTED = "unsupported"
"""The skip code of a file that is neither of a listed type nor text (formats.unlisted_reason)."""
MAX_RULES_BYTES = 4 * 1024 * 1024
"""A rules file larger than this is refused as unreadable (git's own are kilobytes)."""
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
    real_root = contained_root(real, roots)
    if real_root is None:
        raise PathOutsideRoots(f"Path outside the configured document roots: {candidate}")
    try:
        exists = candidate.exists()
    except OSError as exc:  # ENAMETOOLONG and friends, which exists() does not swallow
        raise InvalidArgument(f"Cannot use the path {printable(candidate)[:300]}: {exc.strerror or exc}") from None
    if must_exist and not exists:
        raise NotFound(f"No such file: {candidate}",
                       hint=Hint("Check the path; {} shows what is under the roots.", NextAction("list")))
    # A link inside a root is indexed under its own name; a path that reaches a
    # root through an outside link is indexed under its target.
    lexical_root = contained_root(candidate, roots)
    if lexical_root is not None:
        return candidate, lexical_root
    return real, real_root


class RulesUnreadable(Exception):
    """A rules file exists but cannot be read or parsed; what it governs is not scanned."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"the ignore rules in {name} cannot be applied ({why}); "
                         "what they govern is not indexed until the file is fixed")


@dataclass(frozen=True)
class _RuleFile:
    """The patterns of one rules file and the directory (as text ending in /) they are relative to."""

    base: str
    spec: pathspec.GitIgnoreSpec
    name: str


def _load_rules(path: Path, base: Path, root: Path) -> _RuleFile | None:
    """The patterns in `path`, or None when there is no such file (or no pattern in it).

    Raises RulesUnreadable for a file that is there but unusable: a dangling or
    looping link, a directory, a FIFO, no permission, not UTF-8, a bad pattern.
    """
    name = printable(path.relative_to(root) if path.is_relative_to(root) else path)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise RulesUnreadable(name, "it is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file")
        if info.st_size > MAX_RULES_BYTES:
            raise RulesUnreadable(name, f"larger than {MAX_RULES_BYTES // 1024 // 1024} MiB")
        data = path.read_bytes()
    except FileNotFoundError:
        if os.path.lexists(path):
            raise RulesUnreadable(name, "a symbolic link that leads nowhere") from None
        return None
    except OSError as exc:
        raise RulesUnreadable(name, exc.strerror or str(exc)) from None
    try:
        lines = data.decode("utf-8").removeprefix("\ufeff").splitlines()
    except UnicodeDecodeError as exc:
        raise RulesUnreadable(name, f"not valid UTF-8 at byte {exc.start}") from None
    try:
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError as exc:  # pathspec's GitIgnorePatternError
        raise RulesUnreadable(name, str(exc)) from None
    if not any(p.include is not None for p in spec.patterns):
        return None  # blank lines and comments only
    return _RuleFile(str(base).rstrip("/") + "/", spec, name)


class IgnoreRules:
    """The rules in force in one directory: git's (shallowest first) and the root's `.indexignore`."""

    __slots__ = ("git", "index")

    def __init__(self, git: tuple[_RuleFile, ...] = (), index: _RuleFile | None = None) -> None:
        self.git = git
        self.index = index

    def ignores(self, path: Path, is_dir: bool = False) -> str | None:
        """The name of the rules file that excludes `path`, else None."""
        if not self.git and self.index is None:
            return None
        text = str(path) + "/" if is_dir else str(path)
        for rules in reversed(self.git):  # the deepest file with a say decides; `!` re-includes
            verdict = rules.spec.check_file(text[len(rules.base):]).include
            if verdict is not None:
                if verdict:
                    return rules.name
                break
        if self.index is not None and self.index.spec.match_file(text[len(self.index.base):]):
            return self.index.name
        return None

    def entering(self, directory: Path, root: Path, *, has_git: bool, has_gitignore: bool) -> IgnoreRules:
        """The rules in force inside `directory`: these, plus its repository's info/exclude when a
        repository nested in the root starts there, plus its .gitignore. Raises RulesUnreadable."""
        git = self.git
        if has_git and directory != root:
            exclude = _exclude_file(directory)
            found = _load_rules(exclude, directory, root) if exclude else None
            git += (found,) if found else ()
        if has_gitignore:
            found = _load_rules(directory / GITIGNORE, directory, root)
            git += (found,) if found else ()
        return self if git is self.git else IgnoreRules(git, self.index)


def _exclude_file(top: Path) -> Path | None:
    """The info/exclude file of the repository whose work tree is `top`, or None when none is."""
    dotgit = top / ".git"
    if dotgit.is_dir():
        return dotgit / "info" / "exclude"
    if not dotgit.is_file():
        return None
    try:  # a linked work tree or a submodule: "gitdir: <path>", maybe with a commondir in there
        text = dotgit.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = top / text[len("gitdir:"):].strip()
    with contextlib.suppress(OSError, UnicodeDecodeError):
        gitdir = gitdir / (gitdir / "commondir").read_text("utf-8").strip()
    return gitdir / "info" / "exclude"


def _enclosing_rule(git: tuple[_RuleFile, ...], top: Path, root: Path) -> str | None:
    """The rules file of an enclosing repository that ignores `root` or a directory between the
    work tree's top and it (git would never look inside), or None."""
    for directory in [*reversed(root.parents), root]:
        if directory == top or not directory.is_relative_to(top):
            continue
        text = str(directory) + "/"
        for rules in reversed([r for r in git if text.startswith(r.base)]):  # as IgnoreRules.ignores decides
            verdict = rules.spec.check_file(text[len(rules.base):])
            if verdict.include is not None:
                if verdict.include and verdict.index is not None:
                    pattern = rules.spec.patterns[verdict.index].pattern
                    shown = pattern.decode("utf-8", "replace") if isinstance(pattern, bytes) else pattern
                    return f"{rules.name} (the rule `{shown}`)"
                break
    return None


def _rules_for(root: Path, start: Path) -> tuple[IgnoreRules, str | None, str | None]:
    """The rules in force in `start` (a directory at or under `root`) before its own .gitignore,
    the rules file that ignores `start` itself, if one does, and the enclosing repository's rules
    file set aside because it ignores the root the user named (None when none does).
    Raises RulesUnreadable."""
    rules = IgnoreRules(index=_load_rules(root / INDEXIGNORE, root, root))
    set_aside = None
    repo = next(((d, x) for d in (root, *root.parents) if (x := _exclude_file(d)) is not None), None)
    if repo is not None:  # git's order: info/exclude, then each .gitignore from the work tree's top down
        top, exclude_file = repo
        exclude = _load_rules(exclude_file, top, root)
        above = [d for d in reversed(root.parents) if d == top or d.is_relative_to(top)]
        git = tuple(r for r in (exclude, *(_load_rules(d / GITIGNORE, d, root) for d in above)) if r)
        set_aside = _enclosing_rule(git, top, root) if top != root else None
        if set_aside is None:
            rules = IgnoreRules(git, rules.index)
    directory = root
    for part in start.relative_to(root).parts:
        rules = rules.entering(directory, root, has_git=(directory / ".git").exists(),
                               has_gitignore=os.path.lexists(directory / GITIGNORE))
        directory = directory / part
        rule = rules.ignores(directory, is_dir=directory != start or start.is_dir())
        if rule:
            return rules, rule, set_aside
    return rules, None, set_aside


def ignore_problems(roots: Sequence[Path]) -> list[dict[str, str]]:
    """Where ignore rules could not be applied (the directory left out) or were set aside (a named root
    inside a folder its repository ignores): the directory, its root, and why."""
    return [{"root": str(contained_root(item.path, roots) or ""), "skipped": printable(item.path),
             "reason": item.reason}
            for item in walk(roots, frozenset(), sniff=False)
            if isinstance(item, Skipped) and item.code in (RULES_UNREADABLE, RULES_SET_ASIDE)]

def display_of(path: Path, roots: Sequence[Path]) -> str:
    """A scanned path relative to the root it was found under (the path itself when it is a root)."""
    root = contained_root(path, roots)
    return printable(path.relative_to(root)) if root is not None and path != root else printable(path)


def printable(path: Path) -> str:
    """A path as text that JSON and terminals accept: undecodable bytes become \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def walk(roots: Sequence[Path], extensions: frozenset[str], *, under: Path | None = None,
         report_skips: bool = False, sniff: bool = True) -> Iterator[FoundFile | Skipped]:
    """Every candidate file under the roots (or under `under`), in a stable order.

    A file whose extension is not in `extensions` is a candidate when its content is text
    (`formats.unlisted_reason`; with `sniff`), and is otherwise yielded as Skipped with the
    code "unsupported". Yields Skipped entries for unreadable directories and files, and
    (with `report_skips`) for files excluded by rules, so callers can account for every path
    they saw.
    """
    for root in roots:
        if under is not None and not (under == root or under.is_relative_to(root) or root.is_relative_to(under)):
            continue
        start = under if under is not None and under.is_relative_to(root) else root
        try:
            rules, rule, set_aside = _rules_for(root, start)
        except RulesUnreadable as exc:
            yield Skipped(start, str(exc), RULES_UNREADABLE)
            continue
        if set_aside:
            yield Skipped(root, f"the root lies in a folder ignored by {set_aside}; that repository's rules "
                                "are set aside because the root was named explicitly", RULES_SET_ASIDE)
        if rule:
            if report_skips:
                yield Skipped(start, f"ignored by {rule}", "ignored")
            continue
        seen_dirs: set[tuple[int, int]] = set()
        yield from _walk_dir(start, root, roots, extensions, rules, seen_dirs, report_skips, sniff)


def _walk_dir(directory: Path, root: Path, roots: Sequence[Path], extensions: frozenset[str],
              rules: IgnoreRules, seen_dirs: set[tuple[int, int]], report_skips: bool, sniff: bool,
              depth: int = 0) -> Iterator[FoundFile | Skipped]:
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
    dotted = {e.name for e in entries if e.name[0] == "."}
    if dotted:
        try:
            rules = rules.entering(directory, root, has_git=".git" in dotted, has_gitignore=GITIGNORE in dotted)
        except RulesUnreadable as exc:
            yield Skipped(directory, str(exc), RULES_UNREADABLE)
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
            listed = path.suffix.lower() in extensions
            if not (is_link or report_skips or sniff or listed or entry.is_dir(follow_symlinks=False)):
                continue  # not a document and not asked about: not worth a stat (ignore_problems)
            info = os.stat(path) if is_link else entry.stat(follow_symlinks=False)
        except OSError as exc:
            # A link that leads nowhere (or in a circle) is reported even without report_skips,
            # so a sync accounts for it; its old content is still removed.
            if report_skips or sniff or listed:
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
            yield from _walk_dir(path, root, roots, extensions, rules, seen_dirs, report_skips, sniff, depth + 1)
        elif stat.S_ISREG(info.st_mode):
            if not (listed or sniff):
                continue
            rule = rules.ignores(path)
            if rule:
                if report_skips:
                    yield Skipped(path, f"ignored by {rule}", "ignored")
                continue
            if not os.access(path, os.R_OK):
                yield Skipped(path, "permission denied", "unreadable")
                continue
            why = None if listed else _unlisted(path, info, extensions)
            if why:
                yield Skipped(path, why, "unreadable" if why.startswith(_CANNOT_READ) else UNSUPPORTED)
                continue
            yield FoundFile(path, root, info.st_size, info.st_mtime_ns)


_VERDICTS: dict[tuple[str, int, int, frozenset[str]], str | None] = {}
_VERDICTS_MAX = 200_000
_CANNOT_READ = "cannot read the file"


def _unlisted(path: Path, info: os.stat_result, extensions: frozenset[str]) -> str | None:
    """`formats.unlisted_reason` of a file, remembered per path, size and mtime: a scheduler's
    syncs and list_files read a file's first bytes once while it stays the same."""
    from appliance.ingest.formats import unlisted_reason

    key = (str(path), info.st_size, info.st_mtime_ns, extensions)
    if key in _VERDICTS:
        return _VERDICTS[key]
    try:
        why = unlisted_reason(path, extensions)
    except OSError as exc:
        return f"{_CANNOT_READ}: {exc.strerror or exc}"
    if len(_VERDICTS) >= _VERDICTS_MAX:
        _VERDICTS.clear()
    _VERDICTS[key] = why
    return why


def root_names(roots: Sequence[Path]) -> list[str]:
    """A short name per root: its last path component, or as many trailing components as tell
    it apart from the others (/a/docs and /b/docs are a/docs and b/docs)."""
    names: list[str] = []
    for root in roots:
        parts = root.parts[1:] or ("/",)
        depth = 1
        while depth < len(parts) and any(other != root and other.parts[1:][-depth:] == parts[-depth:]
                                         for other in roots):
            depth += 1
        names.append("/".join(parts[-depth:]))
    return names
