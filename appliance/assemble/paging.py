"""Pages of long replies. list_files: files sorted by path, then data/URL sources sorted by id, cut
after a cursor. read_file: a document's text from a character offset (`text_page`).

The cursor is opaque to clients but simple inside: the sort key of the last entry a
page returned, plus the scope it was listed under, as URL-safe base64 JSON, signed with
the index's cursor key (HMAC-SHA256), so only a cursor this index issued is accepted. The
next page is every entry that sorts after that key, so files added or removed between two
calls never make the walk repeat or skip an entry that existed throughout.
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from pydantic import JsonValue

from appliance.errors import InvalidArgument
from appliance.record import Record
from appliance.results import FileList, FileState, ItemState

DEFAULT_PAGE = 500
"""The MCP tool's default page (10,011 files were one 1.94 MB reply); a page also stops at the reply budget."""
MAX_PAGE = 5000
MAX_CURSOR_CHARS = 8192
READ_PAGE_CHARS = 20_000
"""read_file's default page over MCP: ~5,000 tokens (one HTML page was a 403,890-character reply)."""
MAX_PAGE_CHARS = 200_000
REPLY_BUDGET_CHARS = 80_000
"""The most characters a search or grep answer carries as the JSON a client receives (~20,000
tokens): clients cap tool output (Claude Code warns past 25,000 tokens) and the agent's context pays
for all of it."""
_FILES, _SOURCES = 0, 1
CURSOR_KEY_FILE = ".cursor_key"
_PROCESS_KEY = secrets.token_bytes(32)
"""Signs the cursors of an index this process cannot write a key into (they page on within this process)."""
_PAGE_OVERHEAD_CHARS = 2_000
"""The keys, totals and a cursor around a page's entries (a cursor of a long path is ~1,000)."""


def json_chars(value: Record | JsonValue, *, tools: bool = False) -> int:
    """Characters of `value` (a record, in its wire shape) as JSON, encoded as tool replies are
    (server.result_text)."""
    return len(json.dumps(value.wire(tools=tools) if isinstance(value, Record) else value, ensure_ascii=False))


def cursor_key(db_path: Path) -> bytes:
    """The index's secret for signing cursors, made once beside it (mode 0600): a cursor one process
    issued pages on in another (`minirag list --cursor`, a second server on the same index)."""
    path = db_path / CURSOR_KEY_FILE
    with contextlib.suppress(OSError):
        key = path.read_bytes()
        if len(key) == 32:
            return key
    try:
        db_path.mkdir(parents=True, exist_ok=True)
        draft = db_path / f"{CURSOR_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
        try:
            os.link(draft, path)  # whole or not at all; a process that raced us first wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
        key = path.read_bytes()
    except OSError:
        return _PROCESS_KEY
    return key if len(key) == 32 else _PROCESS_KEY


def page_after(files: list[FileState], sources: list[ItemState], *, scope: str | None,
               limit: int | None, cursor: str | None, key: bytes) -> FileList:
    """At most `limit` entries (None: all, unbudgeted, for the CLI) after `cursor` (None: from the
    start), with the listing's totals and the cursor of the next page.

    A limited page also ends where its JSON would pass REPLY_BUDGET_CHARS (at least one entry),
    so 500 entries with long paths never make a reply a client refuses; nextCursor goes on."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE):
        raise InvalidArgument(f"limit must be an integer from 1 to {MAX_PAGE}, not {limit!r}")
    entries: list[_Entry] = sorted([((_FILES, f.file_path), f) for f in files]
                                   + [((_SOURCES, s.source), s) for s in sources], key=lambda entry: entry[0])
    start = _decode(cursor, scope, key) if cursor is not None else None
    rest = [entry for entry in entries if start is None or entry[0] > start]
    page = rest if limit is None else _within_budget(rest[:limit])
    more = len(page) < len(rest)
    return FileList(files=[e for _key, e in page if not isinstance(e, ItemState)],
                    sources=[e for _key, e in page if isinstance(e, ItemState)],
                    total=len(entries), total_files=len(files), total_sources=len(sources),
                    next_cursor=_encode(page[-1][0], scope, key) if more else None)


_Entry = tuple[tuple[int, str], FileState | ItemState]


def _within_budget(entries: list[_Entry]) -> list[_Entry]:
    used = _PAGE_OVERHEAD_CHARS
    for n, (_key, entry) in enumerate(entries):
        used += json_chars(entry, tools=True) + 2
        if used > REPLY_BUDGET_CHARS and n:
            return entries[:n]
    return entries


def _encode(after: tuple[int, str], scope: str | None, key: bytes) -> str:
    raw = json.dumps({"v": 1, "after": list(after), "scope": scope}, ensure_ascii=False, separators=(",", ":"))
    body = base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")
    return f"{body}.{_signature(body, key)}"


def _signature(body: str, key: bytes) -> str:
    mac = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")


def _decode(cursor: str, scope: str | None, key: bytes) -> tuple[int, str]:
    invalid = InvalidArgument("cursor is not one list_files issued for this index (it is opaque and signed: "
                              "pass nextCursor back unchanged)", hint="Start again without a cursor.")
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
        raise invalid
    body, _, signature = cursor.rpartition(".")
    if not hmac.compare_digest(signature, _signature(body, key)):
        raise invalid
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", "surrogatepass"))
        group, after = data["after"]
        ok = data.get("v") == 1 and group in (_FILES, _SOURCES) and isinstance(after, str)
    except (binascii.Error, ValueError, TypeError, KeyError, AttributeError):
        raise invalid from None
    if not ok:
        raise invalid
    if data.get("scope") != scope:
        raise InvalidArgument(f"cursor belongs to a listing with scope {data.get('scope')!r}, not {scope!r}",
                              hint="Pass the same scope with every page, or start again without a cursor.")
    return group, after


def text_page(content: str, offset: int, max_chars: int | None) -> tuple[str, int | None]:
    """content[offset:] cut to at most max_chars (at a line end in the page's second half when
    there is one), and where the next page starts (None when this one reaches the end)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= len(content):
        raise InvalidArgument(f"offset must be an integer from 0 to {len(content)} (the document's length), "
                              f"not {offset!r}")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int)
                                  or not 1 <= max_chars <= MAX_PAGE_CHARS):
        raise InvalidArgument(f"maxChars must be an integer from 1 to {MAX_PAGE_CHARS}, not {max_chars!r}")
    if max_chars is None or len(content) - offset <= max_chars:
        return content[offset:], None
    end = offset + max_chars
    line_end = content.rfind("\n", offset + max_chars // 2, end)
    end = line_end + 1 if line_end >= 0 else end
    return content[offset:end], end
