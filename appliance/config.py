"""Every setting, resolved once from CLI flags and the environment.

Nothing else in the package reads ``os.environ`` for configuration. A broken
value raises ``ConfigError`` naming the variable; ``status`` catches it and
still answers, every other operation refuses.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from appliance.errors import ConfigError
from appliance.models.manifest import default_models_dir

DEFAULT_MODEL = "intfloat/multilingual-e5-small"
DEFAULT_MAX_FILE_SIZE = 100 * 1024 * 1024
DEFAULT_INGEST_FOREGROUND_MAX_BYTES = 16 * 1024
"""Content an ingest_data/ingest_url call embeds before answering; larger content becomes a job.
scripts/bench_ingest_data.py on the 2-core machine shared with other work: 16 KiB (33 chunks)
took 4.0 s at load average ~2 (4,060 chars/s) and 10.9 s at load ~7 (1,510 chars/s)."""
TOP_K_CAP = 100

Grouping = Literal["similar", "related"]
ChangeDetection = Literal["stat", "hash"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    """The configuration in effect for one process."""

    roots: tuple[Path, ...]
    db_path: Path
    models_dir: Path
    model_name: str = DEFAULT_MODEL
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    ingest_foreground_max_bytes: int = DEFAULT_INGEST_FOREGROUND_MAX_BYTES
    """ingest_data/ingest_url content above this many bytes (UTF-8) runs as a background job; 0: always."""
    chunk_token_budget: int | None = None
    """None means the active model's default budget (see Embedder.default_budget)."""
    hybrid_weight: float = 0.6
    grouping: Grouping | None = None
    max_distance: float | None = None
    max_files: int | None = None
    ocr_languages: str = "eng+deu+rus"
    ocr_min_chars_per_page: int = 100
    convert_timeout_s: float = 180.0
    convert_memory_mb: int = 3072
    convert_workers: int = 1
    embed_threads: int | None = None
    allow_url_ingest: bool = False
    allow_private_urls: bool = False
    snapshot_dedupe: bool = True
    sync_interval_s: int = 900
    change_detection: ChangeDetection = "stat"
    """How a sync decides a file changed: size+mtime ("stat"), or the content hash of every file ("hash")."""
    instructions_extra: str = ""
    env_snapshot: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> dict[str, object]:
        """The values in effect, as `status` prints them."""
        return {
            "baseDirs": [str(r) for r in self.roots],
            "dbPath": str(self.db_path),
            "modelsDir": str(self.models_dir),
            "modelName": self.model_name,
            "maxFileSize": self.max_file_size,
            "ingestForegroundMaxBytes": self.ingest_foreground_max_bytes,
            "chunkTokenBudget": self.chunk_token_budget,
            "hybridWeight": self.hybrid_weight,
            "grouping": self.grouping,
            "maxDistance": self.max_distance,
            "maxFiles": self.max_files,
            "ocrLanguages": self.ocr_languages,
            "ocrMinCharsPerPage": self.ocr_min_chars_per_page,
            "convertTimeoutSeconds": self.convert_timeout_s,
            "convertMemoryMb": self.convert_memory_mb,
            "allowUrlIngest": self.allow_url_ingest,
            "allowPrivateUrls": self.allow_private_urls,
            "snapshotDedupe": self.snapshot_dedupe,
            "syncIntervalSeconds": self.sync_interval_s,
            "changeDetection": self.change_detection,
        }


def load_settings(
    env: Mapping[str, str] | None = None,
    *,
    base_dirs: list[str] | None = None,
    db_path: str | None = None,
    models_dir: str | None = None,
    model_name: str | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Resolve settings: explicit arguments (CLI flags) > environment > defaults.

    Raises ConfigError naming the first invalid setting.
    """
    env = dict(os.environ if env is None else env)
    cwd = cwd or Path.cwd()
    roots = _resolve_roots(base_dirs, env, cwd)
    db = Path(db_path or env.get("DB_PATH") or roots[0] / ".minirag" / "lancedb").expanduser()
    if not db.is_absolute():
        db = cwd / db
    mdir = Path(models_dir or env.get("MODELS_DIR") or default_models_dir()).expanduser()
    grouping = env.get("RAG_GROUPING", "").strip().lower() or None
    if grouping not in (None, "similar", "related"):
        raise ConfigError(f"RAG_GROUPING must be 'similar' or 'related', not {grouping!r}")
    weight = _number(env, "RAG_HYBRID_WEIGHT", float, 0.6)
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"RAG_HYBRID_WEIGHT must be between 0.0 and 1.0, not {weight}")
    budget = _number(env, "CHUNK_TOKEN_BUDGET", int, None)
    if budget is not None and budget < 16:
        raise ConfigError(f"CHUNK_TOKEN_BUDGET must be at least 16 tokens, not {budget}")
    max_distance = _number(env, "RAG_MAX_DISTANCE", float, None)
    if max_distance is not None and max_distance < 0:
        raise ConfigError(f"RAG_MAX_DISTANCE must not be negative, not {max_distance}")
    max_files = _number(env, "RAG_MAX_FILES", int, None)
    if max_files is not None and max_files < 1:
        raise ConfigError(f"RAG_MAX_FILES must be at least 1, not {max_files}")
    max_file_size = _number(env, "MAX_FILE_SIZE", int, DEFAULT_MAX_FILE_SIZE)
    if max_file_size < 1:
        raise ConfigError(f"MAX_FILE_SIZE must be a positive number of bytes, not {max_file_size}")
    foreground = _number(env, "INGEST_FOREGROUND_MAX_BYTES", int, DEFAULT_INGEST_FOREGROUND_MAX_BYTES)
    if foreground < 0:
        raise ConfigError(f"INGEST_FOREGROUND_MAX_BYTES must be 0 (every ingest is a job) or a positive number "
                          f"of bytes, not {foreground}")
    ocr_languages = env.get("OCR_LANGUAGES", "eng+deu+rus").strip() or "eng+deu+rus"
    if not all(part.isalnum() or "_" in part for part in ocr_languages.split("+")):
        raise ConfigError(f"OCR_LANGUAGES must look like 'eng+deu+rus', not {ocr_languages!r}")
    change_detection = env.get("CHANGE_DETECTION", "").strip().lower() or "stat"
    if change_detection not in ("stat", "hash"):
        raise ConfigError(f"CHANGE_DETECTION must be 'stat' (size and mtime) or 'hash' (read every file), "
                          f"not {change_detection!r}")
    extra = env.get("MCP_INSTRUCTIONS_EXTRA", "").strip()
    if len(extra) > 300:
        raise ConfigError(f"MCP_INSTRUCTIONS_EXTRA is {len(extra)} characters; at most 300 fit the instructions budget")
    return Settings(
        roots=roots,
        db_path=db,
        models_dir=mdir,
        model_name=(model_name or env.get("MODEL_NAME") or DEFAULT_MODEL).strip(),
        max_file_size=max_file_size,
        ingest_foreground_max_bytes=foreground,
        chunk_token_budget=budget,
        hybrid_weight=weight,
        grouping=grouping,  # type: ignore[arg-type]
        max_distance=max_distance,
        max_files=max_files,
        ocr_languages=ocr_languages,
        ocr_min_chars_per_page=_positive(env, "RAG_OCR_MIN_CHARS_PER_PAGE", 100),
        convert_timeout_s=float(_positive(env, "CONVERT_TIMEOUT", 180)),
        convert_memory_mb=_positive(env, "CONVERT_MEMORY_MB", 3072),
        convert_workers=_positive(env, "CONVERT_WORKERS", 1),
        embed_threads=_number(env, "EMBED_THREADS", int, None),
        allow_url_ingest=_flag(env, "ALLOW_URL_INGEST"),
        allow_private_urls=_flag(env, "ALLOW_PRIVATE_URLS"),
        snapshot_dedupe=not _flag(env, "NO_SNAPSHOT_DEDUPE"),
        sync_interval_s=_number(env, "SYNC_INTERVAL", int, 900),
        change_detection=change_detection,  # type: ignore[arg-type]
        instructions_extra=extra,
        env_snapshot=env,
    )


def url_ingest_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the egress guard must leave room for the URL fetcher (False when unreadable)."""
    try:
        return _flag(dict(os.environ if env is None else env), "ALLOW_URL_INGEST")
    except ConfigError:
        return False


def _resolve_roots(base_dirs: list[str] | None, env: Mapping[str, str], cwd: Path) -> tuple[Path, ...]:
    """--base-dir > BASE_DIRS > BASE_DIR > cwd; each level replaces the lower ones."""
    if base_dirs:
        raw = list(base_dirs)
        origin = "--base-dir"
    elif env.get("BASE_DIRS", "").strip():
        origin = "BASE_DIRS"
        try:
            raw = json.loads(env["BASE_DIRS"])
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"BASE_DIRS must be a JSON array of path strings ({exc.msg})",
                hint='Example: BASE_DIRS=\'["/docs/a", "/docs/b"]\'',
            ) from None
        if not isinstance(raw, list) or not raw or not all(isinstance(p, str) and p.strip() for p in raw):
            raise ConfigError(
                "BASE_DIRS must be a JSON array of one or more non-empty path strings",
                hint='Example: BASE_DIRS=\'["/docs/a", "/docs/b"]\'',
            )
    elif env.get("BASE_DIR", "").strip():
        raw, origin = [env["BASE_DIR"]], "BASE_DIR"
    else:
        raw, origin = [str(cwd)], "current directory"
    roots: list[Path] = []
    for item in raw:
        path = Path(item).expanduser()
        if not path.is_absolute():
            path = cwd / path
        path = path.resolve()
        if path not in roots:
            roots.append(path)
    if not roots:
        raise ConfigError(f"{origin} names no document root")
    return tuple(roots)


def _number(env: Mapping[str, str], name: str, kind: type, default):  # type: ignore[no-untyped-def]
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {'an integer' if kind is int else 'a number'}, not {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    value = _number(env, name, int, default)
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, not {value}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be one of 1/true/yes/on or 0/false/no/off, not {raw!r}")
