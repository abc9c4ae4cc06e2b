"""The recent-vectors cache of a reusing embed holds its own small copies, at most RECENT_KEYS of them."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from appliance.sync import reuse


def test_recent_vectors_are_copies_and_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(reuse, "RECENT_KEYS", 4)
    batches: list[np.ndarray] = []

    def model(texts: list[str]) -> np.ndarray:
        batch = np.random.default_rng(len(batches)).random((len(texts), 8), dtype=np.float32)
        batches.append(batch)
        return batch

    tally = SimpleNamespace(embedded=0, reused=0)
    embed = reuse.ReusingEmbed(model, lambda keys: {}, 8, tally=tally)
    first = embed([f"text {i}" for i in range(3)])
    embed([f"more {i}" for i in range(3)])
    again = embed(["text 2"])  # still recent: not embedded again
    np.testing.assert_array_equal(again[0], first[2])
    assert (tally.embedded, tally.reused, len(batches)) == (6, 1, 2)
    cached = list(embed._recent.values())
    assert len(cached) == 4
    # a row view would keep its whole batch alive for as long as one of its rows stays cached
    assert all(v.base is None and v.nbytes == 8 * 4 for v in cached)
