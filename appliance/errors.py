"""Every failure the appliance reports: a stable code, one sentence, and a hint.

A hint that names something to run next names it as a NextAction (the operation and its
arguments), and each adapter words it for its reader: the CLI as the command, the MCP server
as its tool (or as the operator's command when no tool does it). A record written to disk keeps
such a text's template and actions beside its CLI words (`storable`, `restored`), so another
process reads it back as a Hint.
"""
from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast


@dataclass(frozen=True)
class NextAction:
    """An operation to run next: the CLI command (`models bake`) and its arguments (`--force`)."""

    command: str
    args: str = ""

    def for_cli(self) -> str:
        return f"`minirag {self.command}{' ' + self.args if self.args else ''}`"


class Hint(str):
    """A text whose `{}` places are next actions (or texts, a Hint among them worded in turn). As a str it
    is the CLI's wording (what the CLI and the status page print); `worded` gives another reader's from
    the same template, and `stored` the form a record written to disk keeps beside that text (`storable`)."""

    template: str
    places: tuple[NextAction | str, ...]

    def __new__(cls, template: str, *places: NextAction | str) -> Hint:
        hint = super().__new__(cls, template.format(*(p.for_cli() if isinstance(p, NextAction) else str(p)
                                                      for p in places)))
        hint.template, hint.places = template, places
        return hint

    @classmethod
    def joined(cls, separator: str, parts: list[str]) -> Hint:
        """The parts with `separator` between them, each keeping its next actions."""
        return cls(separator.replace("{", "{{").replace("}", "}}").join("{}" for _ in parts), *parts)

    def worded(self, say: Callable[[NextAction], str]) -> str:
        return self.template.format(*(say(p) if isinstance(p, NextAction) else p.worded(say) if isinstance(p, Hint)
                                      else p for p in self.places))

    def stored(self) -> dict[str, object]:
        """The template and its places as JSON data (`restored` reads it back)."""
        return {"template": self.template, "places": [
            {"command": p.command, "args": p.args} if isinstance(p, NextAction) else
            p.stored() if isinstance(p, Hint) else p for p in self.places]}

    @classmethod
    def restored(cls, form: object) -> Hint | None:
        """The Hint `stored` gave, or None for anything else."""
        if not isinstance(form, dict) or not isinstance(form.get("template"), str) \
                or not isinstance(form.get("places"), list):
            return None
        places: list[NextAction | str] = []
        for place in form["places"]:
            if isinstance(place, dict) and isinstance(place.get("command"), str):
                places.append(NextAction(place["command"], str(place.get("args") or "")))
            else:
                inner = cls.restored(place) if isinstance(place, dict) else place
                if not isinstance(inner, str):
                    return None
                places.append(inner)
        try:
            return cls(form["template"], *places)
        except (IndexError, KeyError, ValueError):
            return None


_Json = TypeVar("_Json")
NEXT_ACTIONS = "nextActions"
"""The key under which a stored JSON object keeps, for each of its texts that is a Hint, the Hint's
stored form (keyed by the text's key), beside the text in the CLI's words."""


def storable(data: _Json) -> _Json:
    """`data` (JSON objects and lists, texts among them Hints) as written to disk: every Hint stays
    its CLI text, and the object holding it gains NEXT_ACTIONS with its stored form."""
    def keep(obj: dict[str, object]) -> dict[str, object]:
        known = obj.pop(NEXT_ACTIONS, None)
        kept = (known if isinstance(known, dict) else {}) | {key: item.stored() for key, item in obj.items()
                                                             if isinstance(item, Hint)}
        return obj | {NEXT_ACTIONS: kept} if kept else obj

    return cast("_Json", _each_object(data, keep))


def restored(data: _Json) -> _Json:
    """`data` as `storable` wrote it, its texts Hints again (NEXT_ACTIONS removed). A text whose stored
    form does not give it back word for word (an edited file) and a record an older version wrote
    (plain texts, no NEXT_ACTIONS) are shown as written: every reader then gets the CLI's words."""
    def read(obj: dict[str, object]) -> dict[str, object]:
        forms = obj.pop(NEXT_ACTIONS, None)
        for key, form in (forms.items() if isinstance(forms, dict) else ()):
            hint = Hint.restored(form)
            if hint is not None and hint == obj.get(key):
                obj[key] = hint
        return obj

    return cast("_Json", _each_object(data, read))


def _each_object(data: object, change: Callable[[dict[str, object]], dict[str, object]]) -> object:
    """A copy of `data` with `change` applied to each JSON object in it (to a fresh copy, innermost first)."""
    if isinstance(data, list):
        return [_each_object(item, change) for item in data]
    if isinstance(data, dict):
        return change({key: _each_object(item, change) for key, item in data.items()})
    return data


REBAKE = "Re-bake it: {} (or `make models` in a checkout)."
REBAKE_THEN_VERIFY = "Re-bake it: {} (or `make models` in a checkout), then {}."
"""The hint templates for a baked file (model or dictionary) that is missing or damaged: the CLI
command, and the make target that bakes everything in a checkout."""


class ApplianceError(Exception):
    """Base class; adapters turn it into {code, message, hint} exactly once."""

    code = "appliance_error"
    hint: str | None = None

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def message(self) -> str:
        return str(self)

    def to_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "hint": self.hint}

    def with_hint(self) -> str:
        """The message with its hint in parentheses (a Hint when the hint is one)."""
        return Hint("{} ({})", self.message, self.hint) if self.hint else self.message


class ConfigError(ApplianceError):
    code = "config_error"
    hint = Hint("Fix the setting named in the message; {} shows the values in effect.", NextAction("status"))


class ModelMissing(ApplianceError):
    code = "model_missing"
    hint = Hint("Run {} (or `make models`), then {}.", NextAction("models bake"), NextAction("models verify"))


class ModelCorrupt(ApplianceError):
    code = "model_corrupt"
    hint = Hint("Re-bake the model: {}, then {}.", NextAction("models bake", "--force"), NextAction("models verify"))


class InvalidArgument(ApplianceError):
    code = "invalid_argument"


class PathOutsideRoots(ApplianceError):
    code = "path_outside_roots"
    hint = "Give an absolute path inside one of the document roots that `status` lists."


class NotFound(ApplianceError):
    code = "not_found"


class UnsupportedFile(ApplianceError):
    code = "unsupported_file"


class ConversionFailed(ApplianceError):
    code = "conversion_failed"


class FileTooLarge(ApplianceError):
    code = "file_too_large"
    hint = "Raise MAX_FILE_SIZE (bytes) or exclude the file."


class OcrUnavailable(ApplianceError):
    code = "ocr_unavailable"
    hint = ("Install tesseract with its language data (apt-get install tesseract-ocr tesseract-ocr-deu "
            "tesseract-ocr-rus) or use the Docker image.")


class IndexMismatch(ApplianceError):
    code = "index_mismatch"
    hint = Hint("Run {} to rebuild the index with the current model and budget, or point DB_PATH elsewhere.",
                NextAction("sync", "--full"))


class IndexCorrupt(ApplianceError):
    code = "index_corrupt"
    hint = Hint("Run {} to rebuild the index from the documents; it re-embeds ingest_data and URL items from "
                "their stored text, and refuses (naming them) when that text is unreadable.",
                NextAction("sync", "--clean"))


class IndexBusy(ApplianceError):
    """Other processes kept winning the race to commit; nothing is damaged and nothing was lost."""

    code = "index_busy"
    hint = "Another process is writing to the same index; try again in a few seconds."


class DiskFull(ApplianceError):
    code = "disk_full"
    hint = Hint("Free space on the filesystem that holds DB_PATH (`df` shows it), then run {}; the index keeps "
                "serving its last complete state meanwhile.", NextAction("sync"))


class IndexUnwritable(ApplianceError):
    code = "index_unwritable"
    hint = ("Sync and ingest need a writable DB_PATH (queries work read-only): fix the mount or the "
            "permissions, or point DB_PATH elsewhere.")


class StorageUnreachable(ApplianceError):
    """An index in a bucket (DB_PATH=s3://...) could not be reached or refused us."""

    code = "storage_unreachable"
    hint = ("Check DB_PATH's bucket, AWS_ENDPOINT_URL and AWS_REGION, and the credentials in AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY; the index keeps its last complete commit meanwhile.")


# An S3 server answers a failure with an XML body (<Code>NoSuchBucket</Code><Message>...); the object-store
# clients (LanceDB's, obstore) render it verbatim with the request. Only the code is reported: the body
# may echo the access key id, and nothing of the request is needed to act.
_S3_CODE = re.compile(r"<Code>([A-Za-z.]+)</Code>")
_S3_UNREACHABLE = re.compile(r"timed? ?out|connection refused|connection reset|error sending request|dns error"
                             r"|connection closed|broken pipe", re.IGNORECASE)
_S3_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken",
                             "InvalidToken", "InvalidSecurity", "AuthorizationHeaderMalformed"})
_S3_FULL = frozenset({"QuotaExceeded", "XMinioStorageFull", "StorageFull", "ServiceUnavailable.StorageFull"})
_PAST_DEADLINE = re.compile(r"query timeout after|merge insert timed out", re.IGNORECASE)
"""LanceDB's words for a query or merge that ran past the deadline it was given (storage.tables.Tables.deadline)."""


def past_deadline(where: str) -> StorageUnreachable:
    """A read or write of the index in a bucket that ran past storage.tables.Tables.deadline."""
    return StorageUnreachable(f"The object store of {where} did not answer in time (a read or write of the index "
                              "ran past its deadline, which S3_TIMEOUT sets)")


def object_store_error(text: str, where: str) -> ApplianceError | None:
    """The named error for an object store's failure on `where` ("the index at s3://bucket/prefix"), or None
    when `text` is no object-store failure. Never repeats the server's body or the request."""
    found = _S3_CODE.search(text)
    if found:
        code = found.group(1)
        if code == "NoSuchBucket":
            return StorageUnreachable(f"The bucket of {where} does not exist (the server answered NoSuchBucket)")
        if code in _S3_CREDENTIALS:
            return StorageUnreachable(f"The object store refused the credentials for {where} ({code})")
        if code in _S3_FULL:
            return DiskFull(f"The bucket holding {where} is full ({code})", hint=Hint(
                "Raise the bucket's quota or free space in it, then run {}; the index keeps serving its last "
                "complete state meanwhile.", NextAction("sync")))
        return StorageUnreachable(f"The object store failed a request on {where} ({code})")
    if _PAST_DEADLINE.search(text):
        return past_deadline(where)
    reason = _S3_UNREACHABLE.search(text)
    if reason and ("s3" in text.lower() or "http" in text.lower() or "object" in text.lower()):
        return StorageUnreachable(f"The object store of {where} did not answer ({reason.group(0).lower()})")
    return None


CONFLICT_ATTEMPTS = 10
"""How often a write that lost a commit race is tried before IndexBusy (jittered backoff, ~15 s in all)."""
_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+:\d+,?")

# LanceDB (Rust) raises its failures as plain RuntimeError/OSError/ValueError: no exception
# class, no errno attribute, no error code (checked with lancedb 0.40: a full disk, a read-only
# mount and a lost commit race all arrive as RuntimeError). Its errors are told apart here, and
# only here, by the parts Rust renders verbatim: the `lance error:` prefix of the library's own
# error type, the names of its commit-conflict variants, and the OS error number std::io::Error
# appends ("(os error 28)"). Every decision below is then made on that number or flag.
_LANCE_ORIGIN = re.compile(r"\blance error\b|\bLanceError\b", re.IGNORECASE)
_LANCE_CONFLICT = re.compile(r"commit conflict|CommitConflict|preempted by concurrent|concurrent (?:transaction|writer)"
                             r"|Please retry", re.IGNORECASE)
_RUST_OS_ERROR = re.compile(r"\bos error (\d+)\b")


def _from_lance(exc: BaseException) -> bool:
    return bool(_LANCE_ORIGIN.search(str(exc)))


def os_errno(exc: BaseException) -> int | None:
    """The OS error number of a failure: OSError.errno, or the one LanceDB's Rust io error carries."""
    number = getattr(exc, "errno", None)
    if isinstance(number, int):
        return number
    m = _RUST_OS_ERROR.search(str(exc)) if isinstance(exc, OSError) or _from_lance(exc) else None
    return int(m.group(1)) if m else None


def is_commit_conflict(exc: BaseException) -> bool:
    """True for LanceDB's retryable commit conflict: another process committed first
    ("Retryable commit conflict for version 43: ... preempted by concurrent transaction")."""
    return not isinstance(exc, ApplianceError) and bool(_LANCE_CONFLICT.search(str(exc)))


def is_vanished_file(exc: BaseException) -> bool:
    """True for LanceDB not finding one of a table's files (data, deletion or index files): the version being
    read was replaced and its files removed by another process's fold, or the index is damaged."""
    text = str(exc)
    return not isinstance(exc, ApplianceError) and "not found" in text.lower() and ".lance" in text


def _not_ours(db_path: Path, limit: int = 5000) -> tuple[Path, int, int] | None:
    """The first entry under db_path this process may not write: (path, owner uid, owner gid)."""
    me = os.geteuid()
    seen = 0
    for base, dirs, files in os.walk(db_path):
        for name in [".", *dirs, *files]:
            path = Path(base) / name if name != "." else Path(base)
            seen += 1
            if seen > limit:
                return None
            try:
                st = path.lstat()
            except OSError:
                continue
            if st.st_uid != me and not os.access(path, os.W_OK, follow_symlinks=False):
                return path, st.st_uid, st.st_gid
    return None


def permission_error(db_path: Path, text: str) -> IndexUnwritable:
    """Permission denied on the index, naming the owner of what cannot be written and the fix."""
    me, group = os.geteuid(), os.getegid()
    found = _not_ours(db_path)
    if found is None:
        return IndexUnwritable(f"Permission denied on the index at {db_path}: {text}")
    path, uid, gid = found
    return IndexUnwritable(
        f"Permission denied on the index at {db_path}: {path} belongs to uid {uid} (gid {gid}), and this process "
        f"runs as uid {me} (gid {group}); the index was probably written by another user, e.g. a host process "
        f"and the container",
        hint=(f"Give the index to one user: `chown -R {me}:{group} {db_path}` (for a Docker volume: "
              f"`docker run --rm -u 0 -v VOLUME:/index --entrypoint chown IMAGE -R {me}:{group} /index`), "
              f"or run this process as uid {uid}; a host process and the container should not share one index "
              "folder unless they run as the same user."))


def storage_error(exc: BaseException, where: str, db_path: Path | None = None) -> ApplianceError | None:
    """The named error for a failed read or write of `where` ("the index at /index"), or None
    when the exception is no storage failure.

    Decided on the OS error number (`os_errno`) and, for LanceDB's own errors, on their
    origin and conflict variant (see the note above `os_errno`).
    """
    if isinstance(exc, ApplianceError):
        return exc
    if is_commit_conflict(exc):
        return IndexBusy(f"{where[:1].upper() + where[1:]} was changed by another process at the same moment, "
                         f"{CONFLICT_ATTEMPTS} times in a row: {_RUST_LOCATION.sub('', str(exc)).strip()}")
    text = _RUST_LOCATION.sub("", " ".join(str(exc).split())).strip()
    remote = object_store_error(text, where) if "s3://" in where else None
    if remote is not None:
        return remote
    number = os_errno(exc)
    subject = where[:1].upper() + where[1:]
    if number in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"The disk holding {where} is full: {text}")
    if number == errno.EROFS:
        return IndexUnwritable(f"{subject} is on a read-only filesystem: {text}")
    if number in (errno.EACCES, errno.EPERM):
        if db_path is not None:
            return permission_error(db_path, text)
        return IndexUnwritable(f"Permission denied on {where}: {text}")
    if isinstance(exc, OSError) or _from_lance(exc):
        return IndexCorrupt(f"{subject} is damaged or unreadable: {text}")
    return None


class RootsChanged(ApplianceError):
    """The index holds files under a root this process does not have: the same documents
    mounted elsewhere (host vs container) look like a folder whose files all vanished."""

    code = "roots_changed"


class SyncBusy(ApplianceError):
    code = "sync_busy"
    hint = Hint("Wait for the running sync to finish; {} shows its progress.", NextAction("status"))


class UrlRefused(ApplianceError):
    code = "url_refused"


class UrlIngestDisabled(ApplianceError):
    code = "url_ingest_disabled"
    hint = "Set ALLOW_URL_INGEST=1 and give the container a network to fetch URLs."
