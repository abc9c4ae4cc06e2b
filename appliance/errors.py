"""Every failure the appliance reports: a stable code, one sentence, and a hint."""
from __future__ import annotations

import errno
import re


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


class ConfigError(ApplianceError):
    code = "config_error"
    hint = "Fix the setting named in the message; `minirag status` shows the values in effect."


class ModelMissing(ApplianceError):
    code = "model_missing"
    hint = "Run `minirag models bake` (or `make models`), then `minirag models verify`."


class ModelCorrupt(ApplianceError):
    code = "model_corrupt"
    hint = "Re-bake the model: `minirag models bake --force`, then `minirag models verify`."


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
    hint = "Install tesseract with its language data (apt-get install tesseract-ocr tesseract-ocr-deu tesseract-ocr-rus) or use the Docker image."


class IndexMismatch(ApplianceError):
    code = "index_mismatch"
    hint = "Run `minirag sync --full` to rebuild the index with the current model and budget, or point DB_PATH elsewhere."


class IndexCorrupt(ApplianceError):
    code = "index_corrupt"
    hint = ("Run `minirag sync --clean` to rebuild the index from the documents; it re-embeds ingest_data "
            "and URL items from their stored text, and refuses (naming them) when that text is unreadable.")


class IndexBusy(ApplianceError):
    """Other processes kept winning the race to commit; nothing is damaged and nothing was lost."""

    code = "index_busy"
    hint = "Another process is writing to the same index; try again in a few seconds."


class DiskFull(ApplianceError):
    code = "disk_full"
    hint = ("Free space on the filesystem that holds DB_PATH (`df` shows it), then run `minirag sync`; "
            "the index keeps serving its last complete state meanwhile.")


class IndexUnwritable(ApplianceError):
    code = "index_unwritable"
    hint = ("Sync and ingest need a writable DB_PATH (queries work read-only): fix the mount or the "
            "permissions, or point DB_PATH elsewhere.")


CONFLICT_ATTEMPTS = 8
"""How often a write that lost a commit race is tried before IndexBusy (backoff up to ~10 s in all)."""
_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+:\d+,?")
_CONFLICT = re.compile(r"commit conflict|CommitConflict|preempted by concurrent|concurrent (?:transaction|writer)"
                       r"|Please retry", re.IGNORECASE)


def is_commit_conflict(exc: BaseException) -> bool:
    """True for LanceDB's retryable commit conflict: another process committed first.

    LanceDB raises it as a plain RuntimeError/OSError whose text names the conflict
    ("Retryable commit conflict for version 43: ... preempted by concurrent transaction").
    """
    return not isinstance(exc, ApplianceError) and bool(_CONFLICT.search(str(exc)))


def storage_error(exc: BaseException, where: str) -> ApplianceError | None:
    """The named error for a failed read or write of `where` ("the index at /index"), or None
    when the exception is no storage failure.

    Python raises OSError with an errno; LanceDB raises RuntimeError/OSError/ValueError
    whose text carries the OS error or "lance error", so both are looked at.
    """
    if isinstance(exc, ApplianceError):
        return exc
    if is_commit_conflict(exc):
        return IndexBusy(f"{where[:1].upper() + where[1:]} was changed by another process at the same moment, "
                         f"{CONFLICT_ATTEMPTS} times in a row: {_RUST_LOCATION.sub('', str(exc)).strip()}")
    text = _RUST_LOCATION.sub("", " ".join(str(exc).split())).strip()
    number = getattr(exc, "errno", None)
    subject = where[:1].upper() + where[1:]
    if number in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text or "os error 28" in text:
        return DiskFull(f"The disk holding {where} is full: {text}")
    if number == errno.EROFS or "Read-only file system" in text or "os error 30" in text:
        return IndexUnwritable(f"{subject} is on a read-only filesystem: {text}")
    if number in (errno.EACCES, errno.EPERM) or "Permission denied" in text or "os error 13" in text:
        return IndexUnwritable(f"Permission denied on {where}: {text}")
    if isinstance(exc, OSError) or "lance error" in text.lower() or "LanceError" in text:
        return IndexCorrupt(f"{subject} is damaged or unreadable: {text}")
    return None


class SyncBusy(ApplianceError):
    code = "sync_busy"
    hint = "Wait for the running sync to finish; `minirag status` shows its progress."


class UrlRefused(ApplianceError):
    code = "url_refused"


class UrlIngestDisabled(ApplianceError):
    code = "url_ingest_disabled"
    hint = "Set ALLOW_URL_INGEST=1 and give the container a network to fetch URLs."
