"""Exact-match search over the text files the indexer would index: pattern -> (file, line).

The caller hands in the indexer's own file list (discover.walk with the
service's extensions), so ignore rules cannot drift apart between search and
grep. Only formats stored as plain text on disk are read; PDF, Office and
image files have no lines to grep.

Regular expressions come from an untrusted caller, so a catastrophic pattern
must not hang the server: with the optional `regex` package every line gets
its own timeout; without it the scan runs in a child process that is killed
at the deadline. Either way the result says the search was cut short.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from appliance.errors import InvalidArgument

try:  # optional: per-match timeouts; the subprocess fallback covers its absence
    import regex as _regex_module
except ImportError:  # pragma: no cover - depends on the environment
    _regex_module = None

GREPPABLE_EXTENSIONS = frozenset({".md", ".markdown", ".txt", ".csv", ".json", ".html", ".htm"})
MAX_RESULTS_CAP = 500
MAX_PATTERN_CHARS = 1000
MAX_LINE_CHARS = 400
DEADLINE_S = 10.0
LINE_TIMEOUT_S = 0.25

ReadText = Callable[[Path], str]


@dataclass(frozen=True)
class GrepFile:
    path: Path
    display: str


@dataclass
class GrepResult:
    pattern: str
    is_regex: bool
    matches: list[dict[str, Any]] = field(default_factory=list)
    files_searched: int = 0
    truncated: bool = False
    """True when max_results was reached before the corpus was exhausted."""
    stopped: str | None = None
    """'deadline' or 'regex_timeout' when the scan was cut short; None when it ran to the end."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "regex": self.is_regex, "matches": self.matches,
                "matchCount": len(self.matches), "filesSearched": self.files_searched,
                "truncated": self.truncated, "stopped": self.stopped, "skipped": self.skipped,
                "seconds": round(self.seconds, 3)}


def compile_pattern(pattern: str, *, is_regex: bool, case_sensitive: bool) -> "re.Pattern[str]":
    """Validate the pattern once, up front; InvalidArgument says what is wrong with it."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgument("The pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidArgument(f"The pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS} are accepted")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        return re.compile(pattern if is_regex else re.escape(pattern), flags)
    except re.error as exc:
        raise InvalidArgument(f"The regular expression does not compile: {exc}",
                              hint="Pass regex=false to search for the text literally.") from None


def grep(files: Iterable[GrepFile], pattern: str, *, is_regex: bool = False, case_sensitive: bool = False,
         max_results: int = 100, deadline_s: float = DEADLINE_S, read: ReadText) -> GrepResult:
    """Matching lines in file order, at most `max_results`, within `deadline_s` seconds."""
    if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= MAX_RESULTS_CAP:
        raise InvalidArgument(f"maxResults must be an integer from 1 to {MAX_RESULTS_CAP}, not {max_results!r}")
    compiled = compile_pattern(pattern, is_regex=is_regex, case_sensitive=case_sensitive)
    started = time.monotonic()
    result = GrepResult(pattern=pattern, is_regex=is_regex)
    targets = [f for f in files if f.path.suffix.lower() in GREPPABLE_EXTENSIONS]
    search = _timed_search(compiled) if is_regex else compiled.search
    if search is None:
        _grep_in_child(targets, compiled, max_results, started + deadline_s, result)
    else:
        _scan(targets, search, max_results, started + deadline_s, read, result)
    result.seconds = time.monotonic() - started
    return result


class _LineTimeout(Exception):
    pass


def _timed_search(compiled: "re.Pattern[str]") -> Callable[[str], Any] | None:
    """A search with a per-line timeout, or None when the `regex` package cannot take the pattern."""
    if _regex_module is None:
        return None
    try:
        timed = _regex_module.compile(compiled.pattern, _regex_module.IGNORECASE if compiled.flags & re.IGNORECASE else 0)
    except Exception:  # a pattern only the standard library accepts: the child process takes it
        return None

    def search(line: str) -> Any:
        try:
            return timed.search(line, timeout=LINE_TIMEOUT_S)
        except TimeoutError:
            raise _LineTimeout from None

    return search


def _scan(targets: Sequence[GrepFile], search: Callable[[str], Any], max_results: int, deadline: float,
          read: ReadText, result: GrepResult) -> None:
    for f in targets:
        if time.monotonic() > deadline:
            result.stopped = "deadline"
            return
        try:
            text = read(f.path)
        except Exception as exc:  # unreadable or binary under a text name: note it and go on
            result.skipped.append({"path": str(f.path), "reason": str(getattr(exc, "message", exc))[:200]})
            continue
        result.files_searched += 1
        try:
            for number, line, hit in _matching_lines(text, search, deadline):
                if len(result.matches) >= max_results:
                    result.truncated = True
                    return
                result.matches.append(_match(f, number, line, hit.start()))
        except _LineTimeout:
            result.stopped = "regex_timeout"
            return
        except TimeoutError:
            result.stopped = "deadline"
            return


def _matching_lines(text: str, search: Callable[[str], Any], deadline: float) -> Iterator[tuple[int, str, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if number % 2048 == 0 and time.monotonic() > deadline:
            raise TimeoutError
        hit = search(line)
        if hit is not None:
            yield number, line, hit


def _match(f: GrepFile, number: int, line: str, start: int) -> dict[str, Any]:
    if len(line) > MAX_LINE_CHARS:  # keep the match in view on very long lines
        begin = max(0, min(start - MAX_LINE_CHARS // 4, len(line) - MAX_LINE_CHARS))
        line = ("…" if begin else "") + line[begin:begin + MAX_LINE_CHARS] + "…"
    return {"filePath": str(f.path), "displayPath": f.display, "lineNumber": number, "line": line}


# ---- fallback without the `regex` package: a child process killed at the deadline ----

def _grep_in_child(targets: Sequence[GrepFile], compiled: "re.Pattern[str]", max_results: int, deadline: float,
                   result: GrepResult) -> None:
    job = {"pattern": compiled.pattern, "flags": compiled.flags & re.IGNORECASE, "max": max_results,
           "files": [[str(f.path), f.display] for f in targets]}
    proc = subprocess.Popen([sys.executable, "-m", "appliance.grep"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(json.dumps(job).encode(), timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        result.stopped = "regex_timeout"
    for raw in out.decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue  # the last line of a killed child may be cut mid-write
        kind = item.pop("kind", None)
        if kind == "match":
            result.matches.append(item)
        elif kind == "skipped":
            result.skipped.append(item)
        elif kind == "done":
            result.files_searched, result.truncated = item["filesSearched"], item["truncated"]
            if item.get("stopped"):
                result.stopped = item["stopped"]


def _child_main() -> None:
    from appliance.ingest.textfile import read_text

    job = json.loads(sys.stdin.read())
    compiled = re.compile(job["pattern"], job["flags"])
    result = GrepResult(pattern=job["pattern"], is_regex=True)
    emitted = 0

    class Streaming(list):  # type: ignore[type-arg]
        def append(self, item: dict[str, Any]) -> None:
            nonlocal emitted
            super().append(item)
            emitted += 1
            sys.stdout.write(json.dumps({"kind": "match", **item}, ensure_ascii=False) + "\n")
            sys.stdout.flush()

    result.matches = Streaming()
    files = [GrepFile(Path(p), d) for p, d in job["files"]]
    _scan(files, compiled.search, job["max"], float("inf"), lambda p: read_text(p)[0], result)
    for item in result.skipped:
        sys.stdout.write(json.dumps({"kind": "skipped", **item}, ensure_ascii=False) + "\n")
    sys.stdout.write(json.dumps({"kind": "done", "filesSearched": result.files_searched,
                                 "truncated": result.truncated, "stopped": result.stopped}) + "\n")


if __name__ == "__main__":
    _child_main()
