"""The OnnxEmbedder over the tiny real-ONNX model: lazy loading, counting, batching, errors."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from appliance.embed import OnnxEmbedder, load_spec
from appliance.errors import ConfigError, ModelCorrupt, ModelMissing
from tests.fixtures.tiny_model import write_tiny_model

WORDS = ["the", "cat", "sits", "on", "the", "mat", "dogs", "bark", "at", "night", "search", "finds", "passages", "in",
         "documents"]


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    return write_tiny_model(models), models


@pytest.fixture(scope="module")
def embedder(baked):
    spec, models = baked
    return OnnxEmbedder(spec, models, threads=1)


def _text(n_words: int, offset: int = 0) -> str:
    return " ".join(WORDS[(i + offset) % len(WORDS)] for i in range(n_words))


def test_nothing_loads_until_first_use(tmp_path, baked):
    spec, _ = baked
    lazy = OnnxEmbedder(spec, tmp_path / "nowhere")
    assert lazy.dim == spec.dim
    with pytest.raises(ModelMissing) as info:
        lazy.embed_query("x")
    assert "minirag models bake" in info.value.hint


def test_vectors_are_float32_unit_length_and_prefixed(embedder):
    passages = embedder.embed_passages(["the cat sits", "dogs bark"])
    query = embedder.embed_query("the cat sits")
    assert passages.dtype == np.float32 and passages.shape == (2, embedder.dim)
    assert query.shape == (embedder.dim,)
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(query, passages[0])  # "query: " vs "passage: "
    assert embedder.embed_passages([]).shape == (0, embedder.dim)


def test_counting_is_untruncated_and_without_specials(embedder):
    long_text = _text(2000)
    assert embedder.count_tokens(long_text) >= 2000 > 512
    assert embedder.count_tokens("the cat") == 2
    assert embedder.count_tokens("") == 0


def test_window_leaves_room_for_specials_and_prefix(embedder):
    prefix_tokens = embedder.count_tokens("passage: x") - embedder.count_tokens("x")
    assert embedder.window == embedder.spec.max_seq_length - 2 - prefix_tokens


def test_overlong_text_embeds_as_its_first_window(embedder):
    window = embedder.window
    [long_vec, cut_vec] = embedder.embed_passages([_text(500), _text(window)])
    assert embedder.count_tokens(_text(window)) == window
    np.testing.assert_allclose(long_vec, cut_vec, atol=1e-5)


def test_batches_stay_within_budget_and_keep_order(baked):
    spec, models = baked
    small = OnnxEmbedder(spec, models, threads=1, token_budget=120, max_batch=3)
    texts = [_text(n, n) for n in (3, 50, 7, 60, 1, 20, 2, 5, 40)]
    batches = small._batches(["passage: " + t for t in texts])
    assert sorted(i for b in batches for i in b) == list(range(len(texts)))
    for batch in batches:
        widths = [min(small.count_tokens("passage: " + texts[i]) + 2, spec.max_seq_length) for i in batch]
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(widths) <= 120
    together = small.embed_passages(texts)
    alone = np.stack([small.embed_passages([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_concurrent_first_use_loads_once(baked):
    spec, models = baked
    fresh = OnnxEmbedder(spec, models)
    start = threading.Barrier(4)

    def work(i: int) -> np.ndarray:
        start.wait()
        return fresh.embed_query(f"query {i}")

    with ThreadPoolExecutor(4) as pool:
        vectors = list(pool.map(work, range(4)))
    assert all(v.shape == (spec.dim,) for v in vectors)
    second = OnnxEmbedder(spec, models)  # same model registered again in this process: no ValueError
    np.testing.assert_allclose(second.embed_query("query 0"), vectors[0], atol=1e-6)


def test_damaged_baked_file_is_model_corrupt(tmp_path):
    spec = write_tiny_model(tmp_path)
    with open(tmp_path / spec.dir_name / "model.onnx", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(ModelCorrupt) as info:
        OnnxEmbedder(spec, tmp_path).embed_query("x")
    assert "model.onnx" in str(info.value) and "minirag models bake" in info.value.hint


def test_missing_tokenizer_is_model_missing(tmp_path):
    spec = write_tiny_model(tmp_path)
    (tmp_path / spec.dir_name / "tokenizer.json").unlink()
    with pytest.raises(ModelMissing, match=r"tokenizer\.json"):
        OnnxEmbedder(spec, tmp_path).count_tokens("x")


def test_load_spec_rejects_unknown_ids():
    assert load_spec("intfloat/multilingual-e5-small").dim == 384
    with pytest.raises(ConfigError, match="intfloat/multilingual-e5-small"):
        load_spec("intfloat/e5-huge")


def test_embed_queries_matches_embed_query(embedder):
    batch = embedder.embed_queries(["the cat", "dogs bark at night"])
    np.testing.assert_allclose(batch[1], embedder.embed_query("dogs bark at night"), atol=1e-5)


def test_truncated_file_is_caught_by_size_at_load(tmp_path):
    spec = write_tiny_model(tmp_path)
    path = tmp_path / spec.dir_name / "tokenizer.json"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ModelCorrupt, match="bytes"):
        OnnxEmbedder(spec, tmp_path).count_tokens("x")


def test_the_session_lets_idle_threads_sleep_and_keeps_no_arena(embedder):
    """Spinning threads took the conversion worker's core during a sync (scripts/bench_corpus_sync.py);
    the arena would keep a long-lived server at its peak batch's memory."""
    embedder.load()
    options = embedder._model.model.model.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.enable_cpu_mem_arena is False
