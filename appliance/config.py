"""Every setting: one pydantic-settings model of the environment, resolved with the CLI flags.

`Environment` holds every environment variable the appliance reads, typed, with the error a bad
value gets. A composition root reads it once per process (`read_environment()`: the `minirag`
CLI, the container entrypoint, the scheduler's round process) and passes it down;
`Environment.settings()` resolves it with the CLI flags into the `Settings` the service uses.
No other module reads ``os.environ`` for configuration (tests/unit/test_config.py checks).

A bad value does not stop the read: it is kept as a ``ConfigError`` naming the variable and its
field keeps the default, so what a server needs for itself (token, address, handshake) stays
usable, ``status`` answers with the error, and ``settings()`` (every other operation) raises it.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import AfterValidator, BeforeValidator, PrivateAttr, SecretStr, ValidationError, ValidationInfo
from pydantic_core import PydanticUseDefault
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from appliance.errors import ConfigError
from appliance.models.manifest import default_models_dir
from appliance.results import SettingsView

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
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*")
"""A DNS host name (underscores too, as container and Compose service names have them)."""
_BASE_DIRS_HINT = 'Example: BASE_DIRS=\'["/docs/a", "/docs/b"]\''
REPLICA_MEMORY_SHARE = 0.25
REPLICA_MEMORY_CAP_BYTES = 1 << 30
"""The in-memory replica of the index may take a quarter of the memory this process may use, and never
more than 1 GiB: ~150,000 chunks at 384 dimensions, whose exact scan (~25 ms) still fits a query; a serving
process of a million chunks reads through LanceDB's indexes and stays near 1 GB (appliance.storage.replica)."""


S3_SCHEME = "s3://"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""An S3 bucket name (3-63 characters of lower-case letters, digits, dots and hyphens)."""


@dataclass(frozen=True)
class Bucket:
    """Where the tables live when DB_PATH is an ``s3://bucket/prefix`` URI, and how to reach it.

    The credentials are fields that never print (``repr=False``): `Settings.describe`, `status`
    and every error name the URI, the endpoint and the region only.
    """

    name: str
    prefix: str
    region: str | None = None
    endpoint: str | None = None
    """AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL: an S3-compatible server (MinIO, Ceph, R2); None means AWS."""
    allow_http: bool = False
    timeout_s: float = 30.0
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"{S3_SCHEME}{self.name}/{self.prefix}" if self.prefix else f"{S3_SCHEME}{self.name}"

    def storage_options(self) -> dict[str, str]:
        """The object-store options LanceDB (and obstore, without the ``aws_`` prefix) take."""
        options = {"timeout": f"{self.timeout_s:g}s", "connect_timeout": f"{min(self.timeout_s, 5.0):g}s",
                   "client_max_retries": "2", "client_retry_timeout": f"{self.timeout_s * 2:g}"}
        for key, value in (("aws_access_key_id", self.access_key_id), ("aws_secret_access_key", self.secret_access_key),
                           ("aws_session_token", self.session_token), ("aws_region", self.region),
                           ("aws_endpoint", self.endpoint)):
            if value:
                options[key] = value
        if self.allow_http:
            options["allow_http"] = "true"
        return options


def memory_limit() -> int:
    """The memory this process may use: the cgroup's limit (a container's --memory) or the machine's."""
    try:
        raw = open("/sys/fs/cgroup/memory.max").read().strip()  # noqa: SIM115 (one read of a pseudo-file)
        if raw.isdigit():
            return int(raw)
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 4 << 30


def replica_budget() -> int:
    """Bytes the in-memory replica may take (REPLICA_MEMORY_SHARE of memory_limit, at most the cap)."""
    return min(REPLICA_MEMORY_CAP_BYTES, int(memory_limit() * REPLICA_MEMORY_SHARE))


@dataclass(frozen=True)
class Settings:
    """The configuration in effect for one process: `Environment.settings()` resolves every field
    (the defaults live on `Environment`, once)."""

    roots: tuple[Path, ...]
    db_path: Path
    """The index's directory; for an index in a bucket, this host's state directory (STATE_DIR: the sync
    lock, progress, last sync, scheduler record, hand-off socket), the tables being in `bucket`."""
    models_dir: Path
    model_name: str
    max_file_size: int
    ingest_foreground_max_bytes: int
    """ingest_data/ingest_url content above this many bytes (UTF-8) runs as a background job; 0: always."""
    chunk_token_budget: int | None
    """None means the active model's default budget (see Embedder.default_budget)."""
    hybrid_weight: float
    grouping: Grouping | None
    max_distance: float | None
    max_files: int | None
    ocr_languages: str
    ocr_min_chars_per_page: int
    convert_timeout_s: float
    convert_memory_mb: int
    convert_workers: int
    embed_threads: int | None
    allow_url_ingest: bool
    allow_private_urls: bool
    snapshot_dedupe: bool
    sync_interval_s: int
    change_detection: ChangeDetection
    """How a sync decides a file changed: size+mtime ("stat"), or the content hash of every file ("hash")."""
    instructions_extra: str
    models_manifest: Path | None
    """MODELS_MANIFEST: the model manifest looked at first (see appliance.models.manifest.manifest_path)."""
    container: bool
    """MINIRAG_CONTAINER=1: running in the image, where a document root must be a mount point."""
    ray_address: str | None = None
    """RAY_ADDRESS: `minirag sync` runs on this Ray cluster (appliance/cluster; the [cluster] extra)."""
    sync_delete_limit: int = 50
    """SYNC_DELETE_LIMIT: a whole-index sync keeps a root's files instead of deleting more than this
    percentage of them at once (sync.plan.held_roots); 100 turns that check off (a missing or empty
    root is always held)."""
    bucket: Bucket | None = None
    """DB_PATH=s3://bucket/prefix: the tables, identity.json and the writer lease live there."""
    sync_round_files: int = 5000
    """SYNC_ROUND_FILES: a sync indexes more files than this in rounds of this many, each in a child process
    of its own, so its memory stays bounded (sync.rounds); 0 indexes everything in the syncing process."""
    replica_budget_bytes: int = field(default_factory=replica_budget)
    """Bytes of the index this process may hold in memory (replica_budget, from the memory limit when the
    settings are resolved): an index that fits is ranked by the exact in-memory replica, a larger one
    through LanceDB's indexes (appliance.storage.reads.IndexReader.ranker)."""

    def describe(self) -> SettingsView:
        """The values in effect, as `status` prints them."""
        return SettingsView(
            base_dirs=[str(r) for r in self.roots], db_path=self.index_location, models_dir=str(self.models_dir),
            state_dir=str(self.db_path) if self.bucket else None,
            storage_endpoint=self.bucket.endpoint if self.bucket else None,
            model_name=self.model_name, max_file_size=self.max_file_size,
            ingest_foreground_max_bytes=self.ingest_foreground_max_bytes, chunk_token_budget=self.chunk_token_budget,
            hybrid_weight=self.hybrid_weight, grouping=self.grouping, max_distance=self.max_distance,
            max_files=self.max_files, ocr_languages=self.ocr_languages,
            ocr_min_chars_per_page=self.ocr_min_chars_per_page, convert_timeout_seconds=self.convert_timeout_s,
            convert_memory_mb=self.convert_memory_mb, allow_url_ingest=self.allow_url_ingest,
            allow_private_urls=self.allow_private_urls, snapshot_dedupe=self.snapshot_dedupe,
            sync_interval_seconds=self.sync_interval_s, sync_delete_limit=self.sync_delete_limit,
            change_detection=self.change_detection)

    @property
    def index_location(self) -> str:
        """Where the tables are, as messages name it: the directory, or the bucket's URI."""
        return self.bucket.uri if self.bucket else str(self.db_path)



# ------------------------------------------------------------------ parsing one variable

class _Invalid(ValueError):
    """A bad value, with the message (and hint) its ConfigError carries."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def _var(info: ValidationInfo) -> str:
    return (info.field_name or "").upper()


def _set(value: object) -> object:
    """A value without surrounding blanks; a blank one means unset (the field's default)."""
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise PydanticUseDefault()
    return value


def _nonempty(value: object) -> object:
    """An empty value means unset; any other is taken as it is."""
    if value == "":
        raise PydanticUseDefault()
    return value


def _number(kind: type) -> BeforeValidator:
    noun = "an integer" if kind is int else "a number"

    def parse(value: object, info: ValidationInfo) -> object:
        value = _set(value)
        if not isinstance(value, str):
            return value
        try:
            return kind(value)
        except ValueError:
            raise _Invalid(f"{_var(info)} must be {noun}, not {value!r}") from None

    return BeforeValidator(parse)


def _must(test: Callable[[float], bool], what: str) -> AfterValidator:
    def check(value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not test(value):
            raise _Invalid(f"{_var(info)} must {what}, not {value}")
        return value

    return AfterValidator(check)


def _choice(choices: tuple[str, ...], what: str) -> BeforeValidator:
    def parse(value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            value = _set(value.lower())
            if value not in choices:
                raise _Invalid(f"{_var(info)} must be {what}, not {value!r}")
        return value

    return BeforeValidator(parse)


def _flag(value: object, info: ValidationInfo) -> object:
    if not isinstance(value, str):
        return value
    raw = value.strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise _Invalid(f"{_var(info)} must be one of 1/true/yes/on or 0/false/no/off, not {raw!r}")


def _path_list(value: object) -> object:
    value = _set(value)
    if not isinstance(value, str):
        return value
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _Invalid(f"BASE_DIRS must be a JSON array of path strings ({exc.msg})", _BASE_DIRS_HINT) from None
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) and p.strip() for p in raw):
        raise _Invalid("BASE_DIRS must be a JSON array of one or more non-empty path strings", _BASE_DIRS_HINT)
    return tuple(raw)


def _ocr_languages(value: str) -> str:
    if not all(part.isalnum() or "_" in part for part in value.split("+")):
        raise _Invalid(f"OCR_LANGUAGES must look like 'eng+deu+rus', not {value!r}")
    return value


def _instructions_extra(value: str) -> str:
    if len(value) > 300:
        raise _Invalid(f"MCP_INSTRUCTIONS_EXTRA is {len(value)} characters; at most 300 fit the instructions budget")
    return value


Int = Annotated[int, _number(int)]
Number = Annotated[float, _number(float)]
Positive = Annotated[int, _number(int), _must(lambda v: v >= 1, "be at least 1")]
Flag = Annotated[bool, BeforeValidator(_flag)]
Text = Annotated[str, BeforeValidator(_set)]
OptionalPath = Annotated[Path | None, BeforeValidator(_nonempty)]


# ------------------------------------------------------------------ the environment

class Overrides(TypedDict, total=False):
    """The CLI's flags over the environment: Environment.settings' arguments."""

    base_dirs: list[str] | None
    db_path: str | None
    models_dir: str | None
    model_name: str | None


class Environment(BaseSettings):
    """Every environment variable the appliance reads (field name = the variable in lower case).

    Build it with `read_environment()`. The service's settings come first, in the order their
    errors are reported; then what the servers, the entrypoint and model baking read.
    """

    model_config = SettingsConfigDict(case_sensitive=True, alias_generator=str.upper, frozen=True, extra="ignore",
                                      validate_default=False)

    # ---- the service (Environment.settings() -> Settings)
    base_dirs: Annotated[tuple[str, ...] | None, NoDecode, BeforeValidator(_path_list)] = None
    base_dir: str | None = None
    db_path: str | None = None
    models_dir: str | None = None
    model_name: str | None = None
    rag_grouping: Annotated[Grouping | None, _choice(("similar", "related"), "'similar' or 'related'")] = None
    rag_hybrid_weight: Annotated[Number, _must(lambda v: 0.0 <= v <= 1.0, "be between 0.0 and 1.0")] = 0.6
    chunk_token_budget: Annotated[Int | None, _must(lambda v: v >= 16, "be at least 16 tokens")] = None
    rag_max_distance: Annotated[Number | None, _must(lambda v: v >= 0, "not be negative")] = None
    rag_max_files: Annotated[Int | None, _must(lambda v: v >= 1, "be at least 1")] = None
    max_file_size: Annotated[Int, _must(lambda v: v >= 1, "be a positive number of bytes")] = DEFAULT_MAX_FILE_SIZE
    ingest_foreground_max_bytes: Annotated[Int, _must(lambda v: v >= 0, "be 0 (every ingest is a job) or a positive "
                                                      "number of bytes")] = DEFAULT_INGEST_FOREGROUND_MAX_BYTES
    ocr_languages: Annotated[Text, AfterValidator(_ocr_languages)] = "eng+deu+rus"
    change_detection: Annotated[ChangeDetection, _choice(
        ("stat", "hash"), "'stat' (size and mtime) or 'hash' (read every file)")] = "stat"
    mcp_instructions_extra: Annotated[Text, AfterValidator(_instructions_extra)] = ""
    rag_ocr_min_chars_per_page: Positive = 100
    convert_timeout: Positive = 180
    convert_memory_mb: Positive = 3072
    convert_workers: Positive = 1
    embed_threads: Int | None = None
    allow_url_ingest: Flag = False
    allow_private_urls: Flag = False
    no_snapshot_dedupe: Flag = False
    sync_interval: Int = 900
    sync_delete_limit: Annotated[Int, _must(lambda v: 0 <= v <= 100, "be a percentage from 0 to 100")] = 50
    sync_round_files: Annotated[Int, _must(lambda v: v >= 0, "be 0 (one process) or a number of files")] = 5000
    models_manifest: OptionalPath = None
    minirag_container: Annotated[bool, BeforeValidator(lambda v: v == "1" if isinstance(v, str) else v)] = False
    ray_address: Annotated[str | None, BeforeValidator(_nonempty)] = None
    # an index in a bucket (DB_PATH=s3://bucket/prefix): the usual AWS variables, and ours
    state_dir: OptionalPath = None
    s3_allow_http: Flag = False
    s3_timeout: Positive = 30
    aws_access_key_id: Annotated[SecretStr | None, BeforeValidator(_nonempty)] = None
    aws_secret_access_key: Annotated[SecretStr | None, BeforeValidator(_nonempty)] = None
    aws_session_token: Annotated[SecretStr | None, BeforeValidator(_nonempty)] = None
    aws_region: Annotated[str | None, BeforeValidator(_nonempty)] = None
    aws_default_region: Annotated[str | None, BeforeValidator(_nonempty)] = None
    aws_endpoint_url_s3: Annotated[str | None, BeforeValidator(_nonempty)] = None
    aws_endpoint_url: Annotated[str | None, BeforeValidator(_nonempty)] = None

    # ---- the servers and the container entrypoint (never invalid: they work with a broken configuration)
    mcp_auth_token: Annotated[str, BeforeValidator(lambda v: v.strip() if isinstance(v, str) else v)] = ""
    mcp_http_address: str = "0.0.0.0:8080"
    mcp_allowed_hosts: str = ""
    """Read through `allowed_hosts()`, by `serve-http` and the container's daemon mode only."""
    minirag_supervisor_dir: Path = Path("/etc/minirag")

    # ---- `minirag models bake`
    minirag_cache: OptionalPath = None
    hf_hub_cache: OptionalPath = None
    hf_home: OptionalPath = None
    hf_endpoint: str | None = None

    _problems: dict[str, ConfigError] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only the values read_environment() passes: os.environ (or a given mapping) is read there, once.
        return (init_settings,)

    @property
    def problems(self) -> Mapping[str, ConfigError]:
        """The bad variables, each with its error, in the order they are reported."""
        return dict(self._problems)

    def allowed_hosts(self) -> tuple[str, ...]:
        """MCP_ALLOWED_HOSTS: more host names `serve-http` answers to besides its own address's (see
        appliance.adapters.host_guard), comma-separated, lower case. Raises ConfigError naming a bad entry."""
        names: list[str] = []
        for raw in self.mcp_allowed_hosts.split(","):
            name = raw.strip().lower().rstrip(".")
            if not raw.strip():
                continue
            if not _HOST_NAME.fullmatch(name):
                raise ConfigError(f"MCP_ALLOWED_HOSTS: {raw.strip()!r} is not a host name",
                                  hint="List bare names, comma-separated, without scheme, port or path: "
                                       "MCP_ALLOWED_HOSTS=docs.example.com,minirag")
            names.append(name)
        return tuple(dict.fromkeys(names))

    def settings(self, *, base_dirs: list[str] | None = None, db_path: str | None = None,
                 models_dir: str | None = None, model_name: str | None = None, cwd: Path | None = None) -> Settings:
        """The service's settings: explicit arguments (CLI flags) > environment > defaults.

        Raises the ConfigError of the first bad variable (BASE_DIRS does not count under --base-dir).
        """
        for name, problem in self._problems.items():
            if not (base_dirs and name == "BASE_DIRS"):
                raise problem
        cwd = cwd or Path.cwd()
        roots = self._roots(base_dirs, cwd)
        raw_db = (db_path or self.db_path or "").strip()
        bucket = self._bucket(raw_db) if raw_db.lower().startswith(S3_SCHEME) else None
        if bucket is not None:
            db = self.state_dir or Path.home() / ".minirag" / "state" / bucket.name / (bucket.prefix or "_")
        else:
            db = Path(raw_db or roots[0] / ".minirag" / "lancedb")
        db = db.expanduser()
        if not db.is_absolute():
            db = cwd / db
        return Settings(
            roots=roots,
            db_path=db,
            models_dir=Path(models_dir or self.models_dir or default_models_dir()).expanduser(),
            model_name=(model_name or self.model_name or DEFAULT_MODEL).strip(),
            max_file_size=self.max_file_size,
            ingest_foreground_max_bytes=self.ingest_foreground_max_bytes,
            chunk_token_budget=self.chunk_token_budget,
            hybrid_weight=self.rag_hybrid_weight,
            grouping=self.rag_grouping,
            max_distance=self.rag_max_distance,
            max_files=self.rag_max_files,
            ocr_languages=self.ocr_languages,
            ocr_min_chars_per_page=self.rag_ocr_min_chars_per_page,
            convert_timeout_s=float(self.convert_timeout),
            convert_memory_mb=self.convert_memory_mb,
            convert_workers=self.convert_workers,
            embed_threads=self.embed_threads,
            allow_url_ingest=self.allow_url_ingest,
            allow_private_urls=self.allow_private_urls,
            snapshot_dedupe=not self.no_snapshot_dedupe,
            sync_interval_s=self.sync_interval,
            change_detection=self.change_detection,
            instructions_extra=self.mcp_instructions_extra,
            models_manifest=self.models_manifest,
            container=self.minirag_container,
            ray_address=self.ray_address.strip() if self.ray_address else None,
            sync_delete_limit=self.sync_delete_limit, sync_round_files=self.sync_round_files,
            bucket=bucket,
            replica_budget_bytes=replica_budget(),
        )

    def _bucket(self, uri: str) -> Bucket:
        """DB_PATH=s3://bucket/prefix with the AWS variables; ConfigError naming what is wrong (never a secret)."""
        name, _, prefix = uri[len(S3_SCHEME):].partition("/")
        prefix = prefix.strip("/")
        if "@" in name or "?" in uri or "#" in uri:
            raise ConfigError("DB_PATH must be s3://bucket/prefix without credentials, query or fragment",
                              hint="Give credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.")
        if not _BUCKET_NAME.fullmatch(name):
            raise ConfigError(f"DB_PATH: {name!r} is not an S3 bucket name (3-63 lower-case letters, digits, "
                              "dots, hyphens)", hint="Example: DB_PATH=s3://team-docs/minirag")
        endpoint = (self.aws_endpoint_url_s3 or self.aws_endpoint_url or "").strip().rstrip("/") or None
        if endpoint and not re.fullmatch(r"https?://[^\s/@]+(/[^\s@]*)?", endpoint):
            raise ConfigError(f"AWS_ENDPOINT_URL must be an http(s) URL without credentials, not {endpoint!r}")
        if endpoint and endpoint.startswith("http://") and not self.s3_allow_http:
            raise ConfigError(f"The endpoint {endpoint} is plain http, which sends the index unencrypted",
                              hint="Use https, or set S3_ALLOW_HTTP=1 for a server on this machine or network.")

        def secret(value: SecretStr | None) -> str | None:
            return value.get_secret_value().strip() or None if value is not None else None

        return Bucket(name=name, prefix=prefix, region=self.aws_region or self.aws_default_region,
                      endpoint=endpoint, allow_http=self.s3_allow_http, timeout_s=float(self.s3_timeout),
                      access_key_id=secret(self.aws_access_key_id),
                      secret_access_key=secret(self.aws_secret_access_key),
                      session_token=secret(self.aws_session_token))

    def _roots(self, base_dirs: list[str] | None, cwd: Path) -> tuple[Path, ...]:
        """--base-dir > BASE_DIRS > BASE_DIR > cwd; each level replaces the lower ones."""
        if base_dirs:
            raw, origin = list(base_dirs), "--base-dir"
        elif self.base_dirs:
            raw, origin = list(self.base_dirs), "BASE_DIRS"
        elif self.base_dir and self.base_dir.strip():
            raw, origin = [self.base_dir], "BASE_DIR"
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


VARIABLES = tuple(field.alias or name for name, field in Environment.model_fields.items())
"""The name of every environment variable the appliance reads."""


def read_environment(env: Mapping[str, str] | None = None) -> Environment:
    """Every variable from os.environ (pydantic-settings' source), or from `env` when given.

    Only a composition root calls this without `env`. Never raises: see `Environment.problems`.
    """
    values: dict[str, Any] = (EnvSettingsSource(Environment)() if env is None
                              else {name: env[name] for name in VARIABLES if name in env})
    try:
        return Environment(**values)
    except ValidationError as exc:
        problems = _problems(exc)
    environment = Environment(**{name: value for name, value in values.items() if name not in problems})
    environment._problems = problems
    return environment


def _problems(exc: ValidationError) -> dict[str, ConfigError]:
    """Variable -> its error (our message, from _Invalid), in field order."""
    problems: dict[str, ConfigError] = {}
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "?"
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, _Invalid):
            problems.setdefault(name, ConfigError(str(cause), hint=cause.hint))
        else:  # not expected: every check above raises _Invalid
            problems.setdefault(name, ConfigError(f"{name}: {error['msg']}"))
    return problems


def load_settings(
    env: Mapping[str, str] | None = None,
    *,
    base_dirs: list[str] | None = None,
    db_path: str | None = None,
    models_dir: str | None = None,
    model_name: str | None = None,
    cwd: Path | None = None,
) -> Settings:
    """`read_environment(env).settings(...)`, for tests and scripts: the package itself gets its
    Environment from a composition root. Raises ConfigError naming the first invalid setting."""
    return read_environment(env).settings(base_dirs=base_dirs, db_path=db_path, models_dir=models_dir,
                                          model_name=model_name, cwd=cwd)
