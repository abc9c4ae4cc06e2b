"""Embed only text never embedded before: vectors are reused by content.

The model is the bottleneck of a sync (about 26 chunks/s on 2 cores), and most of
what a sync sends it was embedded before: the unchanged paragraphs of an edited
document, a renamed or copied folder, the batches a killed sync had written. Each
chunk row stores `embed_key`, a hash of the exact text given to the model (after
the title is folded into chunk 0). The model and chunking scheme are the index's
identity, and the lookup only takes rows of the current model and scheme, so a
key found in the index names the vector the model gave for that text; only the
misses go to the model.

The int8 model's vector for a text moves slightly with its batch neighbours
(dynamic quantization scales over the padded batch), so "the vector the model
gives" is the one it gave when the text was first embedded; a reused vector is a
copy of that one, bit for bit.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from appliance.results import Tally
from appliance.storage.index import Index

Lookup = Callable[[list[str]], dict[str, np.ndarray]]
"""keys -> {key: vector} for the keys the index holds a vector for."""
TitledText = Callable[[str, str | None], str]
"""(text, title) -> the text given to the model for a first chunk (chunk 0) with that title."""
KEYED_COLUMNS = ["id", "embed_key", "text", "title", "chunk_index"]

RECENT_KEYS = 8192
"""Vectors this sync embedded that may still wait for the writer (the pipeline holds at
most 4,096 chunks ahead), kept so a text repeated within one sync is embedded once."""


def embed_key(text: str) -> str:
    """The key of the exact text given to the model: 128 bits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class ReusingEmbed:
    """`embed(texts)` that asks the model only for texts without a known vector.

    Used from one thread at a time (the sync's embedding thread). It adds the chunks it
    sent to the model and those it reused to `tally.embedded` and `tally.reused` (the
    run's report, which progress reads while the sync runs); a text repeated within one
    call is embedded once and reused for the rest.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray | Sequence[np.ndarray]], lookup: Lookup,
                 dim: int, *, tally: Tally) -> None:
        self._embed, self._lookup, self._dim, self._tally = embed, lookup, dim, tally
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()

    def __call__(self, texts: list[str]) -> np.ndarray:
        keys = [embed_key(t) for t in texts]
        known = {k: self._recent[k] for k in keys if k in self._recent}
        wanted = sorted({k for k in keys if k not in known})
        if wanted:
            known |= self._lookup(wanted)
        misses: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in known:
                misses.setdefault(key, text)
        if misses:
            fresh = self._embed(list(misses.values()))
            for key, vector in zip(misses, fresh, strict=True):
                # a copy: a row view would keep its whole batch's array alive in the recent cache
                known[key] = np.array(vector, dtype=np.float32)
                self._remember(key, known[key])
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = known[key]
        self._tally.embedded += len(misses)
        self._tally.reused += len(texts) - len(misses)
        return out

    def _remember(self, key: str, vector: np.ndarray) -> None:
        self._recent[key] = vector
        if len(self._recent) > RECENT_KEYS:
            self._recent.popitem(last=False)


class IndexLookup:
    """The index's vectors by key, from rows of the current model and scheme.

    Rows written before `embed_key` existed hold null there; they are keyed from their
    stored text once per sync, on the first miss, and their vectors fetched by row id,
    re-checked against the key because the row may have been rewritten since. No
    migration and no `sync --full`: such rows gain a key whenever they are rewritten.
    Those rows were embedded by the rule of their time: the title went only into chunk
    0's vector (`titled` gives that text).
    """

    def __init__(self, index: Index, model_id: str, scheme: str, titled: TitledText) -> None:
        self._index, self._model_id, self._scheme, self._titled = index, model_id, scheme, titled
        self._unkeyed: dict[str, str] | None = None

    def __call__(self, keys: list[str]) -> dict[str, np.ndarray]:
        found = self._index.reader.vectors_by_key(keys, self._model_id, self._scheme)
        rest = {k for k in keys if k not in found}
        unkeyed = self._unkeyed_ids() if rest else {}
        ids = [unkeyed[k] for k in rest if k in unkeyed]
        for row in self._index.reader.chunks_by_id(ids, self._model_id, self._scheme, [*KEYED_COLUMNS, "vector"]):
            key = self._key_of_row(row)
            if key in rest:
                found[key] = np.asarray(row["vector"], dtype=np.float32)
        return found

    def _unkeyed_ids(self) -> dict[str, str]:
        if self._unkeyed is None:
            rows = self._index.reader.unkeyed_chunks(self._model_id, self._scheme, KEYED_COLUMNS)
            self._unkeyed = {self._key_of_row(row): row["id"] for row in rows}
        return self._unkeyed

    def _key_of_row(self, row: Mapping[str, object]) -> str:
        """A stored row's embed_key; a row from before the column is keyed from its text as that code embedded it."""
        if row.get("embed_key"):
            return str(row["embed_key"])
        text, title = str(row["text"]), row["title"]
        if row["chunk_index"] == 0:
            text = self._titled(text, title if isinstance(title, str) else None)
        return embed_key(text)
