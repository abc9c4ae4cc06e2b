"""Exact-match search over the indexed text of every document: pattern -> (document, place, line).

The caller hands in the indexed documents as `GrepDoc`s: each one's converted text,
rebuilt from its stored chunks (the bodies joined in order, as read_file shows it), and
where each chunk starts in that text. So a PDF, an Office file, an OCRed scan, an
ingest_data item and a fetched page are searched like a text file, and every match is
placed where a person can open it: the original line for sources with lines (text
files, Markdown, JSON, text/Markdown items), else the page range (PDF, scans), slide
(PPTX) or sheet (XLSX) of the chunk the match starts in, plus the chunk index and its
section heading. A line holding Markdown escapes or `*` emphasis is also tried as a person
reads it (markitdown writes GASKET\\_MEMO for a DOCX's GASKET_MEMO).

Regular expressions come from an untrusted caller, so a catastrophic pattern
must not hang the server: they run on the `regex` package, which gives every line
its own timeout, and the result says when the search was cut short.
"""
from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, Required, TypedDict, Unpack

import regex as _regex_module

from appliance.assemble.paging import REPLY_BUDGET_CHARS, json_chars
from appliance.chunks import StoredChunk
from appliance.errors import InvalidArgument
from appliance.results import GrepMatch, GrepResults

MAX_RESULTS_CAP = 500
_MATCHES_BUDGET = REPLY_BUDGET_CHARS - 8_000
"""The matches' share of the reply; the rest is for the counts, the coverage note and skipped files."""
MAX_PATTERN_CHARS = 1000
MAX_LINE_CHARS = 400
DEADLINE_S = 10.0
LINE_TIMEOUT_S = 0.25


class Described(TypedDict):
    """What every match of a document repeats: GrepMatch's fields of the document."""

    source: str
    source_kind: str
    file_path: str | None
    display_path: str
    title: str | None


class Located(TypedDict):
    """Where in its document a match is: GrepMatch's fields of the place."""

    chunk_index: int
    heading: str | None
    page_start: int | None
    page_end: int | None
    slide: int | None
    sheet: str | None
    line_number: int | None


class Coverage(TypedDict, total=False):
    """What the filters select and what grep could not search of it (GrepResults' coverage fields)."""

    documents_indexed: Required[int]
    unindexed_files: int
    failed_files: int
    stale_files: int
    note: str | None


class Found(Protocol):
    """A match of the pattern in a line (`re` or `regex`)."""

    def start(self) -> int: ...


Search = Callable[[str], Found | None]


def describe(source_id: str, kind: str, display: str, title: str | None) -> Described:
    """What every match of a document repeats (GrepMatch's source, source_kind, file_path, display_path, title)."""
    return {"source": source_id, "source_kind": kind, "file_path": source_id if kind == "file" else None,
            "display_path": display, "title": title or None}


@dataclass
class GrepDoc:
    """One indexed document: its text (chunk bodies joined) and where each chunk starts in it."""

    source: Described
    """What every match of it repeats (describe)."""
    text: str
    starts: list[int]
    places: list[Located]
    """Per chunk: chunk_index, heading, page_start, page_end, slide, sheet, and its first line (line_number)."""

    @classmethod
    def from_chunks(cls, chunks: Sequence[StoredChunk]) -> GrepDoc:
        """The document of `chunks` (the stored chunks of one source, in chunk order)."""
        first = chunks[0]
        source = describe(first.source_id, first.source_kind, first.path, first.title)
        parts, starts, at = [], [], 0
        places: list[Located] = []
        for chunk in chunks:
            body = chunk.body
            starts.append(at)
            parts.append(body)
            at += len(body)
            places.append({"chunk_index": chunk.chunk_index, "heading": chunk.heading or None,
                           "page_start": chunk.page_start, "page_end": chunk.page_end,
                           "slide": chunk.slide, "sheet": chunk.sheet or None,
                           "line_number": chunk.start_line})
        return cls(source, "".join(parts), starts, places)

    @classmethod
    def empty(cls, source: Described) -> GrepDoc:
        """An indexed document without text (an empty file): searched, never matched."""
        return cls(source, "", [], [])

    @property
    def converted(self) -> bool:
        """True when the text is a converter's Markdown (no source lines): PDF, Office, HTML, scans."""
        return bool(self.places) and self.places[0]["line_number"] is None

    def locate(self, offset: int) -> Located:
        """Where the text at `offset` is: the source's line (when it has lines), page, slide, sheet, chunk."""
        k = max(0, bisect_right(self.starts, offset) - 1)
        first_line = self.places[k]["line_number"]
        return self.places[k] | {"line_number": None if first_line is None
                                 else first_line + self.text.count("\n", self.starts[k], offset)}


@dataclass
class GrepScan:
    """What a scan found and searched so far; `results` gives the record."""

    pattern: str
    is_regex: bool
    matches: list[GrepMatch] = field(default_factory=list)
    documents_searched: int = 0
    files_searched: int = 0
    truncated: bool = False
    """True when max_results, or the reply's character budget, was reached before the documents
    were exhausted."""
    chars: int = 0
    """The matches' size as JSON, kept under REPLY_BUDGET_CHARS (500 long lines were 245,000)."""
    stopped: Literal["deadline", "regex_timeout"] | None = None
    """Why the scan was cut short; None when it ran to the end."""
    seconds: float = 0.0

    def results(self, **coverage: Unpack[Coverage]) -> GrepResults:
        """The record, with what the caller knows about what was not searched (GrepResults' coverage fields)."""
        return GrepResults(pattern=self.pattern, regex=self.is_regex, matches=self.matches,
                           match_count=len(self.matches), documents_searched=self.documents_searched,
                           files_searched=self.files_searched, **coverage,
                           truncated=self.truncated, stopped=self.stopped, seconds=round(self.seconds, 3))

    def count(self, doc: GrepDoc) -> None:
        self.documents_searched += 1
        self.files_searched += doc.source["source_kind"] == "file"


def compile_pattern(pattern: str, *, is_regex: bool, case_sensitive: bool) -> re.Pattern[str]:
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


def path_glob(glob: str) -> Callable[[str], bool]:
    """A matcher of display paths for `fileGlob`, with .gitignore's rules: a glob without a '/' matches
    the name at any depth (`*.pdf`), one with a '/' is anchored at the root (`reports/**/*.md`; `**`
    spans folders), a trailing '/' takes everything under a folder."""
    import pathspec

    if not isinstance(glob, str) or not glob.strip() or "\x00" in glob or len(glob) > MAX_PATTERN_CHARS:
        raise InvalidArgument(f"fileGlob must be a non-empty pattern of at most {MAX_PATTERN_CHARS} characters")
    if glob.startswith("!"):
        raise InvalidArgument("fileGlob cannot be a negation ('!…'): give the files to search")
    try:
        spec = pathspec.GitIgnoreSpec.from_lines([glob.strip()])
    except ValueError as exc:
        raise InvalidArgument(f"fileGlob {glob!r} is not a valid pattern: {exc}") from None
    return spec.match_file


def check_max_results(max_results: int) -> None:
    if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= MAX_RESULTS_CAP:
        raise InvalidArgument(f"maxResults must be an integer from 1 to {MAX_RESULTS_CAP}, not {max_results!r}")


def grep(docs: Iterable[GrepDoc], pattern: str, *, is_regex: bool = False, case_sensitive: bool = False,
         max_results: int = 100, deadline_s: float = DEADLINE_S) -> GrepScan:
    """Matching lines in document order, at most `max_results`, within `deadline_s` seconds.

    `docs` may be lazy (read from the index batch by batch): the deadline covers reading too."""
    check_max_results(max_results)
    compiled = compile_pattern(pattern, is_regex=is_regex, case_sensitive=case_sensitive)
    started = time.monotonic()
    result = GrepScan(pattern=pattern, is_regex=is_regex)
    search = _timed_search(compiled) if is_regex else compiled.search
    # a literal found in no line is found nowhere in the text: one pass in C skips most documents
    anywhere = None if is_regex else lambda doc: _anywhere(compiled, doc.text)
    _scan(docs, search, max_results, started + deadline_s, result, anywhere)
    result.seconds = time.monotonic() - started
    return result


class _LineTimeout(Exception):
    pass


def _timed_search(compiled: re.Pattern[str]) -> Search:
    """A search with a per-line timeout (the `regex` package); InvalidArgument for a pattern only
    the standard library accepts."""
    try:
        flags = _regex_module.IGNORECASE if compiled.flags & re.IGNORECASE else 0
        timed = _regex_module.compile(compiled.pattern, flags)
    except _regex_module.error as exc:
        raise InvalidArgument(
            f"The regular expression is not supported by the timed matcher: {exc}",
            hint="Rewrite the pattern, or pass regex=false to search for the text literally.") from None

    def search(line: str) -> Found | None:
        try:
            return timed.search(line, timeout=LINE_TIMEOUT_S)
        except TimeoutError:
            raise _LineTimeout from None

    return search


def _anywhere(compiled: re.Pattern[str], text: str) -> bool:
    """Whether the literal may match a line of `text`, as stored or as read (see _matching_lines)."""
    if compiled.search(text) is not None:
        return True
    return ("\\" in text or "*" in text) and compiled.search(_MARKUP.sub(lambda m: m.group(1) or "", text)) is not None


def _scan(docs: Iterable[GrepDoc], search: Search, max_results: int, deadline: float,
          result: GrepScan, anywhere: Callable[[GrepDoc], bool] | None = None) -> None:
    for doc in _until(docs, deadline, result):
        result.count(doc)
        if anywhere is not None and not anywhere(doc):
            continue
        try:
            for offset, line, column, shown in _matching_lines(doc.text, search, deadline,
                                                               converted=doc.converted):
                match = _match(doc, offset, line, column, shown)
                size = json_chars(match) + 1
                if len(result.matches) >= max_results or result.chars + size > _MATCHES_BUDGET:
                    result.truncated = True
                    return
                result.matches.append(match)
                result.chars += size
        except _LineTimeout:
            result.stopped = "regex_timeout"
            return
        except TimeoutError:
            result.stopped = "deadline"
            return


def _until(docs: Iterable[GrepDoc], deadline: float, result: GrepScan) -> Iterator[GrepDoc]:
    """The documents while time is left; past the deadline, result.stopped says so."""
    for doc in docs:
        if time.monotonic() > deadline:
            result.stopped = "deadline"
            return
        yield doc


_MARKUP = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~=&])|\*+")
"""What a converter adds to the words: backslash escapes (markitdown writes GASKET\\_MEMO for
GASKET_MEMO in DOCX, XLSX, HTML, EPUB) and `*` emphasis (a **bold** word inside a phrase)."""


def _plain(line: str) -> tuple[str, list[int]]:
    """The line as a person reads it (escapes and `*` runs removed), and for each of its
    characters the column it comes from in the line."""
    out: list[str] = []
    columns: list[int] = []
    at = 0
    for m in _MARKUP.finditer(line):
        out.append(line[at:m.start()])
        columns.extend(range(at, m.start()))
        if m.group(1):
            out.append(m.group(1))
            columns.append(m.start() + 1)
        at = m.end()
    out.append(line[at:])
    columns.extend(range(at, len(line)))
    return "".join(out), columns


def _matching_lines(text: str, search: Search, deadline: float, *,
                    converted: bool = False) -> Iterator[tuple[int, str, int, int]]:
    """(offset of the line in text, the line as shown, the match's column in text's line, its column in
    the line shown) of every matching line. A line with Markdown escapes or emphasis is also tried as a
    person reads it: first for a `converted` document (the markup is the converter's), after the line
    as stored otherwise; it is shown the way it matched."""
    at = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if number % 2048 == 0 and time.monotonic() > deadline:
            raise TimeoutError
        plain, columns = _plain(line) if "\\" in line or "*" in line else (None, None)
        tries = [(line, None)] if plain is None else [(plain, columns), (line, None)] if converted \
            else [(line, None), (plain, columns)]
        for shown, mapping in tries:
            hit = search(shown)
            if hit is not None:
                column = hit.start() if mapping is None else (
                    mapping[hit.start()] if hit.start() < len(mapping) else len(line))
                yield at, shown, column, hit.start()
                break
        at += len(line) + 1


def _match(doc: GrepDoc, line_offset: int, line: str, column: int, shown_column: int) -> GrepMatch:
    if len(line) > MAX_LINE_CHARS:  # keep the match in view on very long lines
        begin = max(0, min(shown_column - MAX_LINE_CHARS // 4, len(line) - MAX_LINE_CHARS))
        line = ("…" if begin else "") + line[begin:begin + MAX_LINE_CHARS] + "…"
    return GrepMatch(**doc.source, **doc.locate(line_offset + column), line=line)
