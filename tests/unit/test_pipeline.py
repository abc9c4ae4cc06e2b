"""The sync's embed/write pipeline: order, batching, back-pressure and errors."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from appliance.sync.pipeline import EmbedWritePipeline, Work


def _work(name: str, n: int) -> Work:
    return Work([name], [{"id": f"{name}:{i}"} for i in range(n)], [f"{name} text {i}" for i in range(n)])


def _vector(text: str) -> np.ndarray:
    return np.array([len(text), sum(map(ord, text))], dtype=np.float32)


class Recorder:
    def __init__(self) -> None:
        self.embed_calls: list[list[str]] = []
        self.writes: list[list[Work]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embed_calls.append(list(texts))
        return np.stack([_vector(t) for t in texts])

    def write(self, works: list[Work]) -> None:
        self.writes.append(works)


def test_every_row_gets_its_own_vector_and_is_written_once_in_order():
    rec = Recorder()
    works = [_work(f"s{i}", i % 7) for i in range(40)]
    with EmbedWritePipeline(rec.embed, rec.write, ahead_chunks=50, batch_chunks=16) as pipe:
        for w in works:
            pipe.put(w)
        pipe.close()
    written = [w for batch in rec.writes for w in batch]
    assert [w.sources for w in written] == [w.sources for w in works]
    for w in written:
        assert len(w.rows) == len(w.texts)
        for row, text in zip(w.rows, w.texts, strict=True):
            assert np.array_equal(row["vector"], _vector(text))
    assert sum(len(c) for c in rec.embed_calls) == sum(len(w.texts) for w in works)


def test_embed_calls_stay_within_the_batch_except_one_large_work():
    rec = Recorder()
    with EmbedWritePipeline(rec.embed, rec.write, ahead_chunks=1000, batch_chunks=10) as pipe:
        for w in [_work("a", 4), _work("b", 4), _work("c", 4), _work("big", 25), _work("d", 3)]:
            pipe.put(w)
        pipe.close()
    assert max(len(c) for c in rec.embed_calls) == 25
    assert all(len(c) <= 10 for c in rec.embed_calls if not c[0].startswith("big"))
    assert [c for c in rec.embed_calls if c[0].startswith("big")] == [[f"big text {i}" for i in range(25)]]


def test_works_without_texts_are_written_without_an_embed_call():
    rec = Recorder()
    with EmbedWritePipeline(rec.embed, rec.write, ahead_chunks=10, batch_chunks=10) as pipe:
        pipe.put(Work(["failed-file"]))
        pipe.close()
    assert rec.embed_calls == []
    assert [w.sources for batch in rec.writes for w in batch] == [["failed-file"]]


def test_put_waits_while_too_many_chunks_wait_for_the_model():
    release = threading.Event()
    started = threading.Event()
    rec = Recorder()

    def slow_embed(texts: list[str]) -> np.ndarray:
        started.set()
        release.wait(10)
        return rec.embed(texts)

    with EmbedWritePipeline(slow_embed, rec.write, ahead_chunks=10, batch_chunks=5) as pipe:
        pipe.put(_work("first", 5))   # taken by the model, which then blocks
        assert started.wait(5)
        pipe.put(_work("a", 5))
        pipe.put(_work("b", 5))       # 10 waiting: the bound
        blocked = threading.Thread(target=pipe.put, args=(_work("c", 1),))
        blocked.start()
        time.sleep(0.3)
        assert blocked.is_alive(), "put must wait while ahead_chunks chunks wait"
        release.set()
        blocked.join(5)
        assert not blocked.is_alive()
        pipe.close()
    assert [w.sources[0] for batch in rec.writes for w in batch] == ["first", "a", "b", "c"]


def test_a_work_larger_than_the_bound_still_goes_when_nothing_waits():
    rec = Recorder()
    with EmbedWritePipeline(rec.embed, rec.write, ahead_chunks=3, batch_chunks=3) as pipe:
        pipe.put(_work("huge", 20))
        pipe.close()
    assert sum(len(w.rows) for batch in rec.writes for w in batch) == 20


def test_an_embedding_error_reaches_the_caller_and_nothing_after_it_is_written():
    rec = Recorder()
    boom = RuntimeError("model damaged")

    def embed(texts: list[str]) -> np.ndarray:
        if any(t.startswith("bad") for t in texts):
            raise boom
        return rec.embed(texts)

    with (pytest.raises(RuntimeError) as caught,
          EmbedWritePipeline(embed, rec.write, ahead_chunks=100, batch_chunks=2) as pipe):
        pipe.put(_work("good", 2))
        pipe.put(_work("bad", 2))
        for i in range(50):
            pipe.put(_work(f"late{i}", 2))
            time.sleep(0.001)
        pipe.close()
    assert caught.value is boom
    names = [w.sources[0] for batch in rec.writes for w in batch]
    assert "bad" not in names and not any(n.startswith("late") for n in names)
    assert not [t for t in threading.enumerate() if t.name.startswith("sync-")]


def test_a_write_error_reaches_the_caller_and_stops_the_model():
    rec = Recorder()
    boom = OSError(28, "No space left on device")

    def write(works: list[Work]) -> None:
        raise boom

    with pytest.raises(OSError) as caught, EmbedWritePipeline(rec.embed, write, ahead_chunks=4, batch_chunks=2) as pipe:
        for i in range(200):
            pipe.put(_work(f"w{i}", 2))
        pipe.close()
    assert caught.value is boom
    assert sum(len(c) for c in rec.embed_calls) < 400
    assert not [t for t in threading.enumerate() if t.name.startswith("sync-")]


def test_leaving_on_the_callers_error_abandons_unwritten_work_and_joins():
    release = threading.Event()
    rec = Recorder()

    def slow_embed(texts: list[str]) -> np.ndarray:
        release.wait(10)
        return rec.embed(texts)

    with pytest.raises(KeyError), EmbedWritePipeline(slow_embed, rec.write, ahead_chunks=100, batch_chunks=2) as pipe:
        for i in range(10):
            pipe.put(_work(f"w{i}", 2))
        release.set()
        raise KeyError("caller failed")
    assert not [t for t in threading.enumerate() if t.name.startswith("sync-")]
    assert len([w for batch in rec.writes for w in batch]) < 10


def test_embedded_all_follows_the_last_embedding_of_a_closed_pipeline_and_only_then():
    """A round of a long sync lets the next one start at `embedded_all` (sync/rounds.py): it comes once,
    after every text is embedded, and not when the work is abandoned."""
    rec = Recorder()
    seen: list[int] = []
    with EmbedWritePipeline(rec.embed, rec.write, ahead_chunks=50, batch_chunks=4,
                            embedded_all=lambda: seen.append(sum(len(c) for c in rec.embed_calls))) as pipe:
        for i in range(12):
            pipe.put(_work(f"s{i}", 3))
        assert not seen  # not closed yet: more work may come
        pipe.close()
    assert seen == [36]

    release = threading.Event()
    abandoned: list[int] = []

    def slow_embed(texts: list[str]) -> np.ndarray:
        release.wait(10)
        return rec.embed(texts)

    with pytest.raises(KeyError), EmbedWritePipeline(slow_embed, rec.write, ahead_chunks=100, batch_chunks=2,
                                                     embedded_all=lambda: abandoned.append(1)) as pipe:
        for i in range(5):
            pipe.put(_work(f"w{i}", 2))
        release.set()
        raise KeyError("caller failed")
    assert not abandoned
