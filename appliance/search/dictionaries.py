"""The baked bilingual dictionaries (models/manifest.toml, `[[dictionary]]`), read at run time.

Each lookup is a sorted text file of `key<TAB>value` lines (appliance.models.dictionaries
writes them). It stays in memory as its bytes plus every 64th key, and a key is found
by binary search: some 14 MB of files cost about 15 MB of memory and load in a
fraction of a second, where dicts of Python strings would cost several times that.

The dictionaries are optional at run time: when they are missing or damaged, search
works without translation and compound splitting, and `status` says why and how to bake.
"""
from __future__ import annotations

import bisect
import logging
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from appliance.errors import REBAKE, ApplianceError, Hint, ModelCorrupt, NextAction
from appliance.models.dictionaries import LEXICON, PAIRS

log = logging.getLogger(__name__)

DICTIONARY_ID = "debian/xling-dictionaries"
"""The manifest id of the baked dictionaries."""
SOURCES = {"de-en": "Ding (trans-de-en)", "en-de": "Ding (trans-de-en)", "en-ru": "Müller (mueller7-dict)",
           "ru-en": "Müller (mueller7-dict)", "de-ru": "FreeDict/WikDict (dict-freedict-deu-rus)",
           "ru-de": "FreeDict/WikDict (dict-freedict-deu-rus)"}
"""Which dictionary each language pair comes from (explain names it)."""


class Table:
    """A sorted `key<TAB>value` file searched in place: the key of every BLOCK-th line is kept in a
    list, a lookup bisects that list (in C) and then finds the line in its block of bytes."""

    BLOCK = 64

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        if self.data and not self.data.endswith(b"\n"):
            raise ModelCorrupt(f"Dictionary file {path} is truncated (no final newline)")
        ends = np.flatnonzero(np.frombuffer(self.data, dtype=np.uint8) == 10)
        starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else np.zeros(0, np.int64)
        self.lines = len(starts)
        self.block_starts = [int(x) for x in starts[::self.BLOCK]]
        self.block_keys = [self._key_at(start) for start in self.block_starts]

    def __len__(self) -> int:
        return self.lines

    def _key_at(self, start: int) -> bytes:
        tab = self.data.find(b"\t", start, self.data.find(b"\n", start))
        if tab < 0:
            raise ModelCorrupt(f"Dictionary file {self.path} has a line without a tab at byte {start}")
        return self.data[start:tab]

    def get(self, key: str) -> str | None:
        """The value stored for `key`, or None."""
        wanted = key.encode("utf-8")
        block = bisect.bisect_right(self.block_keys, wanted) - 1
        if block < 0 or not wanted:
            return None
        start = self.block_starts[block]
        end = self.block_starts[block + 1] if block + 1 < len(self.block_starts) else len(self.data)
        if self.block_keys[block] == wanted:
            found = start
        else:
            found = self.data.find(b"\n" + wanted + b"\t", start, end)
            if found < 0:
                return None
            found += 1
        value_start = found + len(wanted) + 1
        return self.data[value_start:self.data.find(b"\n", value_start)].decode("utf-8")

    def check_sorted(self) -> None:
        """Raise ModelCorrupt unless the keys are in order (the search depends on it)."""
        if self.block_keys != sorted(self.block_keys):
            raise ModelCorrupt(f"Dictionary file {self.path} is not sorted by key")


@dataclass(frozen=True, eq=False)
class Dictionaries:
    """Every pair's lookup and the German lexicon, loaded from one baked directory."""

    path: Path
    pairs: dict[str, Table]
    lexicon: Table

    @lru_cache(maxsize=50_000)  # noqa: B019 - one Dictionaries per baked directory, kept for the process
    def translations(self, stem: str, source: str, target: str) -> tuple[tuple[str, float], ...]:
        """(target stem, weight) for a source stem, strongest first; () when the pair or the stem is unknown."""
        table = self.pairs.get(f"{source}-{target}")
        value = table.get(stem) if table is not None else None
        if not value:
            return ()
        cells = [cell.rpartition(":") for cell in value.split(" ")]
        return tuple((term, float(weight)) for term, _, weight in cells)

    @lru_cache(maxsize=50_000)  # noqa: B019 - as translations
    def knows(self, stem: str, source: str) -> bool:
        """Whether any pair from `source` has an entry for `stem`."""
        return any(table.get(stem) is not None for pair, table in self.pairs.items() if pair.startswith(source + "-"))

    @lru_cache(maxsize=200_000)  # noqa: B019 - as translations
    def word_count(self, word: str) -> int:
        """How often Ding names the German word (0 when it does not): the compound splitter's evidence."""
        value = self.lexicon.get(word)
        return int(value) if value else 0


def load(directory: Path) -> Dictionaries:
    """Read a baked dictionary directory; raises ModelMissing/ModelCorrupt naming the file."""
    from appliance.models.bake import check_baked
    from appliance.models.manifest import load_manifest

    manifest = load_manifest(models_dir=directory.parent)
    check_baked(manifest.entry(DICTIONARY_ID), directory.parent, full=False)
    pairs = {pair: Table(directory / f"{pair}.tsv") for pair in PAIRS}
    lexicon = Table(directory / LEXICON)
    for table in [*pairs.values(), lexicon]:
        table.check_sorted()
    return Dictionaries(directory, pairs, lexicon)


@dataclass(frozen=True)
class State:
    """The dictionaries of one models directory, or why there are none."""

    dictionaries: Dictionaries | None
    error: ApplianceError | None

    def describe(self) -> dict[str, object]:
        """What `status` shows."""
        if self.dictionaries is not None:
            return {"state": "loaded", "path": str(self.dictionaries.path),
                    "pairs": sorted(self.dictionaries.pairs), "sources": sorted(set(SOURCES.values()))}
        assert self.error is not None
        return {"state": "unavailable", "error": self.error.to_dict(),
                "effect": "search works without translation and compound splitting"}


_LOCK = threading.Lock()
_STATES: dict[Path, State] = {}
_ACTIVE: State | None = None


def activate(models_dir: Path) -> State:
    """Load (once per process and directory) the dictionaries under `models_dir` and make them the ones
    the keyword analyser and query translation use. A problem is logged once, never raised."""
    global _ACTIVE
    directory = Path(models_dir) / DICTIONARY_ID.replace("/", "__")
    with _LOCK:
        state = _STATES.get(directory)
        if state is None:
            try:
                state = State(load(directory), None)
            except ApplianceError as exc:
                log.warning("%s (hint: %s); keyword search runs without translation", exc.message, exc.hint)
                state = State(None, exc)
            except (OSError, ValueError) as exc:
                error = ModelCorrupt(f"Dictionary {directory} cannot be read: {exc}",
                                     hint=Hint(REBAKE,
                                               NextAction("models bake", f"{DICTIONARY_ID} --force")))
                log.warning("%s; keyword search runs without translation", error.message)
                state = State(None, error)
            _STATES[directory] = state
        _ACTIVE = state
        return state


def active() -> Dictionaries | None:
    """The dictionaries the last `activate` loaded, or None."""
    state = _ACTIVE
    return state.dictionaries if state is not None else None


def forget() -> None:
    """Drop every loaded state (tests that damage a dictionary file between loads)."""
    global _ACTIVE
    with _LOCK:
        _STATES.clear()
        _ACTIVE = None
