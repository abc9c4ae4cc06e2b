"""Every failure the appliance reports: a stable code, one sentence, and a hint."""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path


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
    hint = ("Install tesseract with its language data (apt-get install tesseract-ocr tesseract-ocr-deu "
            "tesseract-ocr-rus) or use the Docker image.")


class IndexMismatch(ApplianceError):
    code = "index_mismatch"
    hint = ("Run `minirag sync --full` to rebuild the index with the current model and budget, "
            "or point DB_PATH elsewhere.")


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


CONFLICT_ATTEMPTS = 10
"""How often a write that lost a commit race is tried before IndexBusy (jittered backoff, ~15 s in all)."""
_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+:\d+,?")
_CONFLICT = re.compile(r"commit conflict|CommitConflict|preempted by concurrent|concurrent (?:transaction|writer)"
                       r"|Please retry", re.IGNORECASE)


def is_commit_conflict(exc: BaseException) -> bool:
    """True for LanceDB's retryable commit conflict: another process committed first.

    LanceDB raises it as a plain RuntimeError/OSError whose text names the conflict
    ("Retryable commit conflict for version 43: ... preempted by concurrent transaction").
    """
    return not isinstance(exc, ApplianceError) and bool(_CONFLICT.search(str(exc)))


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
        if db_path is not None:
            return permission_error(db_path, text)
        return IndexUnwritable(f"Permission denied on {where}: {text}")
    if isinstance(exc, OSError) or "lance error" in text.lower() or "LanceError" in text:
        return IndexCorrupt(f"{subject} is damaged or unreadable: {text}")
    return None


class RootsChanged(ApplianceError):
    """The index holds files under a root this process does not have: the same documents
    mounted elsewhere (host vs container) look like a folder whose files all vanished."""

    code = "roots_changed"


class SyncBusy(ApplianceError):
    code = "sync_busy"
    hint = "Wait for the running sync to finish; `minirag status` shows its progress."


class UrlRefused(ApplianceError):
    code = "url_refused"


class UrlIngestDisabled(ApplianceError):
    code = "url_ingest_disabled"
    hint = "Set ALLOW_URL_INGEST=1 and give the container a network to fetch URLs."
