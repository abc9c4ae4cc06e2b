"""Writes to the index and their upkeep: swapping a document's chunks, recording and deleting sources,
and folding new rows into the indexes (compaction, BM25, B-trees, the vector index)."""
from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import timedelta
from functools import partial
from typing import Any

from appliance.platform.hidden_imports import pandas_hidden

with pandas_hidden():  # pyarrow.dataset probes for pandas on import; nothing here uses it
    import pyarrow as pa
    from lancedb.index import FTS, BTree, IvfRq
    from lancedb.table import Table

from appliance.errors import is_commit_conflict
from appliance.platform import native_memory, stopping
from appliance.storage.replica import fits
from appliance.storage.swap import replace_chunks
from appliance.storage.tables import (
    CHUNKS,
    FTS_COLUMN,
    IN_BATCH,
    SOURCE_SCHEMA,
    SOURCES,
    VECTOR_CODE_BITS,
    VECTOR_INDEX_TYPE,
    VECTOR_PARTITION_ROWS,
    SourceRow,
    Tables,
    backoff,
    chunk_schema,
    chunk_write_schema,
    code_bits,
    derive_fields,
    guarded,
    in_list,
    vector_index,
    writes,
)

VECTOR_INDEX_MIN_ROWS = 5000
"""Below this many rows a flat scan beats any vector index, whatever the replica's budget."""
SEGMENTS_MAX = 8
SEGMENTS_MAX_MID_RUN = 32
"""A fold adds the new rows to the BM25 and vector indexes as a segment of their own, and every query searches
every segment: at 1M chunks the 86 HNSW segments a build had left took 109 of a 120 ms vector search, one
segment 22 ms (scripts/bench_scale.py). A refresh finds more than SEGMENTS_MAX and merges an index into one
(the vector index is rebuilt: 43 s at 1M chunks on 2 cores, 8.5 min for the HNSW index before), so a query pays
at most ~10 ms for segments; inside a long run, which folds every FOLD_EVERY_ROWS and at each round's start,
only past SEGMENTS_MAX_MID_RUN. Merging costs what the whole index costs (BM25 at 100,000 chunks: 1.2 s,
+54 MB, where a new segment took 0.3 s, +2 MB), so a long run that merged at every fold grew its memory
with the index."""
KEYWORD_SEGMENTS_MAX = 1
"""BM25's segments after a refresh outside a long run: a search reads each segment on its own, and at 1M chunks
the 4 segments a first sync ended with took a BM25 search from 21 to 38 ms p50, twice a query; merging them
took 11 s (scripts/bench_scale.py's index). Inside a long run BM25 merges only past SEGMENTS_MAX_MID_RUN."""
VECTOR_INDEX = IvfRq(distance_type="cosine", target_partition_size=VECTOR_PARTITION_ROWS, num_bits=VECTOR_CODE_BITS)
"""Lance keeps the partitions near that size as folds add rows, splitting the ones that grow
(tables.VECTOR_INDEX_TYPE)."""


OPTIMIZE_ATTEMPTS = 3
FOLD_EVERY_ROWS = 10_000
"""A long write run (one sync of many files) folds its new rows into the indexes after this many:
a delete by source id, a key lookup and a source upsert scan the rows no index covers yet, so
without it each write of a sync costs more than the one before (scripts/bench_scale.py --flat:
at 20,000 unindexed rows a write's delete took 1.2 s and its key lookup 1.4 s; a fold that
extends existing indexes by 1,000 rows took 3-4.5 s at 23,000 rows, compacting only the new rows)."""
FOLD_DUE_ROWS = 1_000
FOLD_DUE_FRAGMENTS = 20
"""A write folds (compacts and extends the indexes) only once a table has this many rows outside
its indexes or this many fragments: a fold costs ~0.5 s however few rows it adds (a quarter of a
10-file `minirag sync`, and seconds at 100k chunks), while searches scan a few hundred unindexed
rows in well under a millisecond and LanceDB itself advises optimizing after ~20 writes."""
KEEP_REPLACED_FILES = timedelta(hours=1)
"""How long a fold keeps the files of the versions it replaced: LanceDB's default is a week, and a first sync of
1M chunks, which compacts and rebuilds its indexes many times over, left 29 GB on disk where the live data
took a fraction of it. A reader holds a version for one query (IndexReader.query_view); an hour is far longer."""
FOLDED_DELETIONS = 0.1
"""The share of a fragment's rows deleted past which any other fold rewrites it without them: Lance's default."""
SETTLED_DELETIONS = 0.0
"""The share of a fragment's rows deleted past which a fold at a sync's end (`settle`) rewrites it without them:
any. While a fragment the indexes cover holds a deleted row, LanceDB masks every row each vector and BM25 search
scans, one at a time, off its batched kernel: at 1M chunks deleted files made every query cost 3.6-8.9 ms more
CPU until their fragments were rewritten, and Lance's own default (FOLDED_DELETIONS) leaves a few deleted rows a
fragment for good. Rewriting them costs the indexes' remap, most of it BM25's posting lists: 17-23 s at 1M chunks, in a
process peaking at ~890 MB, a fraction of a second at a few thousand (scripts/bench_deletions.py). Inside a long
run folds keep FOLDED_DELETIONS, so a fragment a run keeps deleting from is rewritten once, at its end."""
COMPACT_TARGET_ROWS = 32_768
"""Compaction merges neighbouring fragments of fewer rows than this and leaves larger ones alone. LanceDB's
`optimize()` compacts with Lance's default of ~1M rows, so below a million rows every fold rewrote the whole
table: its time and memory grew with everything a sync had written (scripts/bench_sync_rss.py)."""
log = logging.getLogger(__name__)


def needs_vector_index(rows: int, dim: int, memory_budget: int) -> bool:
    """Whether an index of `rows` rows gets an approximate vector index: only once queries rank it
    through LanceDB, past the in-memory replica's budget (replica.fits). Below that the replica
    scans every vector exactly and an index would only be upkeep: updating it was ~80 % of a fold
    (~8 of ~10 s for 10,000 new rows, on tables of 10,000-100,000 rows). A process with a smaller
    memory budget than the writer's serves an unindexed table by LanceDB's flat scan: exact, slower."""
    return rows >= VECTOR_INDEX_MIN_ROWS and not fits(rows, dim, memory_budget)


def fold(table: Table, *, settle: bool = False) -> None:
    """Compact the small fragments, add the rows outside the indexes to them, and remove the files of versions
    older than KEEP_REPLACED_FILES: LanceDB's `optimize()`, with work that follows what was written since the
    last fold rather than the size of the table. Compaction leaves large fragments alone (COMPACT_TARGET_ROWS);
    the new rows join BM25 as a segment of their own (merged by merge_segments), the vector index as LanceDB adds them;
    the B-trees, cheap to merge (0.02-0.04 s at 100,000 rows) and read by every key lookup and delete of a sync,
    stay one segment each. `settle` (a sync's end) also rewrites every fragment holding deleted rows
    (SETTLED_DELETIONS)."""
    indices = table.list_indices()
    dataset = table.to_lance()  # each step below commits and moves it to the version it made
    dataset.optimize.compact_files(target_rows_per_fragment=COMPACT_TARGET_ROWS,
                                   materialize_deletions_threshold=SETTLED_DELETIONS if settle else FOLDED_DELETIONS)
    for names, merge in (([i.name for i in indices if i.index_type == "FTS"], {"num_indices_to_merge": 0}),
                         ([i.name for i in indices if i.index_type != "FTS"], {})):
        if names:
            dataset.optimize.optimize_indices(index_names=names, **merge)
    dataset.cleanup_old_versions(older_than=KEEP_REPLACED_FILES)
    table.checkout_latest()


def has_deletions(table: Table) -> bool:
    """Whether a fragment of the table's version holds deleted rows (a deletion file beside its data)."""
    return any(fragment.metadata.deletion_file is not None for fragment in table.to_lance().get_fragments())


def merge_segments(table: Table, segments_max: int) -> None:
    """Merge an index other than the vector index that folds have split into more than `segments_max` segments
    into one (IndexWriter._merge_vector_segments rebuilds that one)."""
    split = [(i.name, i.num_segments) for i in table.list_indices()
             if (i.num_segments or 1) > segments_max and i.columns != ["vector"]]
    for name, segments in split:
        log.info("merging the %d segments of %s", segments, name)
        table.to_lance().optimize.optimize_indices(index_names=[name], num_indices_to_merge=segments)
    if split:
        table.checkout_latest()


def _fold_due(table: Table, settle: bool) -> bool:
    """Whether a table has enough rows outside its indexes, or fragments, to fold (FOLD_DUE_ROWS), or, at a sync's
    end (`settle`), deleted rows (SETTLED_DELETIONS)."""
    stats: Any = table.stats()  # a dict from lancedb 0.40's native side, whatever its annotation says
    if stats["fragment_stats"]["num_fragments"] >= FOLD_DUE_FRAGMENTS:
        return True
    if settle and has_deletions(table):
        return True
    return any((covered := table.index_stats(index.name)) is not None and covered.num_unindexed_rows >= FOLD_DUE_ROWS
               for index in table.list_indices())


class IndexWriter:
    """The index's writes and their upkeep. Safe to share between threads; other processes may write too."""

    def __init__(self, tables: Tables, *, on_drop: Callable[[], None]) -> None:
        self.tables = tables
        self._on_drop = on_drop
        """Called when drop_all replaced the tables: what was read of the old ones is no longer theirs."""
        self.rows_unfolded = 0
        """Chunk rows this process added since it last folded rows into the indexes."""
        self._indexed = False
        """Whether the chunks table was seen with its indexes (a write's check, made until it holds)."""
        self._folding = threading.Lock()
        """Held by a fold of this process: two threads folding at once would only race each other."""

    # ---- writing -------------------------------------------------------
    def replace_sources(self, sources: Sequence[SourceRow], rows: list[dict[str, Any]]) -> None:
        """Make `rows` the only chunks of `sources`, then record the sources.

        Each source's chunks are swapped in one commit (appliance/storage/swap.py), so a
        concurrent query sees its old chunks or its new ones, never neither nor both. The `sources` row is
        written last: after a crash in between, the source looks unindexed and
        the next sync re-ingests it. Every FOLD_EVERY_ROWS rows a long run then
        folds its rows into the indexes, as a step of its own: a lost race while
        folding never repeats the committed write. A table with no indexes yet gets them
        after FOLD_DUE_ROWS rows: until then each write's delete and key lookup scan every
        row written (a first sync's first round wrote ~5,500 rows that way, and the round
        after it, which built every index under the write lock, ran slowest:
        scripts/bench_scale.py --flat). Each row's derived fields (its language and card, and the earlier card where
        the table has it: tables.FIELD_DERIVED) are derived here, whoever built it.
        """
        if not sources:
            return
        self.tables.evolve_chunks()
        # the table's fields as they are now, not as opened: another process's clean rebuild drops OLD_CARD
        schema = chunk_write_schema(self.tables.dim, frozenset(self.tables.chunks(create=True).schema.names))
        for row in rows:
            derive_fields(row, schema.names)
        self._replace(sources, rows, schema)
        self.rows_unfolded += len(rows)
        if stopping.requested():  # a stop leaves the folding to the next sync, as it does at the end
            return
        first = not self._indexed and self.rows_unfolded >= FOLD_DUE_ROWS
        if first:
            self._indexed = self.has_fts_index()
        if self.rows_unfolded >= FOLD_EVERY_ROWS or (first and not self._indexed):
            self.refresh_indexes(fold_now=True, segments_max=SEGMENTS_MAX_MID_RUN)

    @writes
    def _replace(self, sources: Sequence[SourceRow], rows: list[dict[str, Any]], schema: pa.Schema) -> None:
        ids = [s.source_id for s in sources]
        with self.tables.lock:
            replace_chunks(self.tables, ids, rows, schema,
                           lambda group: in_list("source_id", group))
            self._upsert_sources(sources)

    @writes
    def record_sources(self, sources: Sequence[SourceRow]) -> None:
        """Update source rows without touching chunks (failures, metadata refresh)."""
        if sources:
            with self.tables.lock:
                self._upsert_sources(sources)

    def _upsert_sources(self, sources: Sequence[SourceRow]) -> None:
        table = self.tables.sources(create=True)
        data = pa.Table.from_pylist([asdict(s) for s in sources], schema=SOURCE_SCHEMA)
        (table.merge_insert("source_id").when_matched_update_all().when_not_matched_insert_all()
         .execute(data, timeout=self.tables.deadline))

    @writes
    def delete_sources(self, ids: Sequence[str]) -> None:
        with self.tables.lock:
            for table, key in ((self.tables.chunks(), "id"), (self.tables.sources(), "source_id")):
                if table is None:
                    continue
                for start in range(0, len(ids), IN_BATCH):
                    self.tables.delete_rows(table, in_list("source_id", ids[start:start + IN_BATCH]), key)

    @writes
    def drop_all(self) -> None:
        """Empty both tables and remove the identity (sync --clean of a damaged index).

        A table Lance can still open gets an empty version of its own (an overwrite
        commit), so a reader in another process keeps reading the version it holds and
        sees the empty one at its next refresh; only a table that cannot be opened at
        all is removed from disk.
        """
        with self.tables.lock:
            db = self.tables.connect()
            for name, schema in ((CHUNKS, chunk_schema(self.tables.dim)), (SOURCES, SOURCE_SCHEMA)):
                if not self.tables.has_table(name):
                    continue
                try:
                    db.create_table(name, schema=schema, mode="overwrite")
                except Exception as exc:
                    if is_commit_conflict(exc) or self.tables.bucket is not None:
                        raise
                    shutil.rmtree(self.tables.db_path / f"{name}.lance", ignore_errors=True)
            self.tables.remove_identity()
            self.tables.forget()
            self._indexed = False
            self._on_drop()

    @guarded
    def read_everything(self) -> None:
        """Read every column of every row once (batch by batch), raising IndexCorrupt on damage."""
        for table in (self.tables.chunks(), self.tables.sources()):
            if table is not None:
                for _batch in table.search().limit(None).to_batches():
                    pass

    # ---- keeping the BM25 index whole ------------------------------------
    @guarded
    def has_fts_index(self) -> bool:
        chunks = self.tables.chunks()
        return chunks is not None and any(i.index_type == "FTS" for i in chunks.list_indices())

    @writes
    def refresh_indexes(self, *, fold_now: bool = False, segments_max: int | None = None,
                        settle: bool = False) -> None:
        """Build missing indexes once rows exist; fold new rows in when due (FOLD_DUE_ROWS), or at once
        (`fold_now`); merge an index that folds split into more than `segments_max` segments into one
        (without it, BM25 past KEYWORD_SEGMENTS_MAX and the vector index past SEGMENTS_MAX). At a sync's end
        (`settle`) a table holding deleted rows is folded too, and its fragments rewritten without them
        (SETTLED_DELETIONS).

        BM25 over `keywords` (never stale: status reports rows it does not cover),
        B-trees on the id columns every read and delete filters on, and a vector
        index (VECTOR_INDEX_TYPE) once queries go through LanceDB (needs_vector_index). Skipped
        when the process is stopping (the next sync builds what is missing; search
        covers unindexed rows meanwhile).
        """
        stopping.check()
        with self.tables.lock:
            chunks = self.tables.chunks()
            if chunks is None:
                return
            rows = chunks.count_rows()
            if rows == 0:
                return
            indices = chunks.list_indices()
            present = {tuple(i.columns) for i in indices}
            self._indexed = True  # built below when missing
            if (FTS_COLUMN,) not in present:
                chunks.create_index(FTS_COLUMN, config=FTS(
                    base_tokenizer="whitespace", lower_case=False, stem=False,
                    remove_stop_words=False, ascii_folding=False, with_position=False,
                    max_token_length=64,
                ))
            # lang: what a translated keyword list searches among (reads.other_languages); a bitmap index answered
            # as fast at 1M chunks but raised a 30,000-file sync's peak RSS by ~65 MB (docs/BENCHMARKS.md)
            for column in ("id", "source_id", "parent_id", "embed_key", "lang"):
                if (column,) not in present:
                    chunks.create_index(column, config=BTree())
            dim, budget = self.tables.dim, self.tables.memory_budget
            vectors = vector_index(chunks, indices)
            if needs_vector_index(rows, dim, budget) and (vectors is None or vectors.index_type != VECTOR_INDEX_TYPE
                                                          or code_bits(vectors) != VECTOR_CODE_BITS):
                # none yet, or one an earlier version built of another kind (IVF-HNSW-SQ, one-bit codes): built anew
                chunks.create_index("vector", config=VECTOR_INDEX, replace=True)
            elif vectors is not None and not needs_vector_index(rows + rows // 4, dim, budget):
                # well inside the replica's budget (a margin, so a table near it is not indexed and
                # dropped in turn): an index built earlier, or by an older version, is only upkeep
                chunks.drop_index(vectors.name)
            sources = self.tables.sources()
            if sources is not None and not any(tuple(i.columns) == ("source_id",) for i in sources.list_indices()):
                sources.create_index("source_id", config=BTree())  # what a sync's upserts match on
            # in a bucket a query reads rows outside the indexes with a request per column page (~27 per
            # changed file): there every refresh folds them in (scripts/bench_object_storage.py)
            fold_now = fold_now or self.tables.bucket is not None
            folded = [table for table in (chunks, sources)
                      if table is not None and (fold_now or _fold_due(table, settle))]
        # The fold runs beside this process's writes, not under their lock: a round's writer goes on while the
        # round's fold works (appliance/sync/rounds.py), as a write of another process always could; Lance
        # resolves the commits, and a write that loses a race is repeated (tables.writes).
        with self._folding:
            if folded and folded[0] is chunks:
                self.rows_unfolded = 0  # rows written from here on wait for the next fold
            for table in folded:
                self._retried(partial(fold, table, settle=settle), table, "compaction")
            for held in (chunks, sources):
                if held is not None:
                    self._retried(partial(merge_segments, held, KEYWORD_SEGMENTS_MAX if segments_max is None
                                          else segments_max), held, "merging segments")
            self._merge_vector_segments(chunks, SEGMENTS_MAX if segments_max is None else segments_max)
        if folded:
            native_memory.give_back()  # what the fold freed: see native_memory

    def _retried(self, step: Callable[[], None], table: Table, what: str) -> None:
        """Run a step of a fold; losing this race to another process is no failure.

        Two processes that both just wrote compact the same fragments; the one that loses
        would redo what the winner did. After a few tries it leaves it: the next refresh
        (every write batch and every sync ends with one) folds whatever is left.
        """
        for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
            try:
                step()
                return
            except Exception as exc:
                if not is_commit_conflict(exc):
                    raise
                self.tables.conflicts_retried += 1
                if attempt == OPTIMIZE_ATTEMPTS:
                    log.info("%s lost %d commit races to other processes; left to the next refresh", what, attempt)
                    return
                backoff(attempt)
                table.checkout_latest()

    def _merge_vector_segments(self, chunks: Table, segments_max: int) -> None:
        """Rebuild the vector index as one segment once folds have split it into more than `segments_max`;
        another process rebuilding it at the same time wins, and that is no failure."""
        index = vector_index(chunks)
        if index is None or (index.num_segments or 1) <= segments_max or stopping.requested():
            return
        log.info("rebuilding the vector index: %d segments", index.num_segments)
        try:
            chunks.create_index("vector", config=VECTOR_INDEX, replace=True)
        except Exception as exc:
            if not is_commit_conflict(exc):
                raise
            self.tables.conflicts_retried += 1
            log.info("another process rebuilt the vector index first")

    @guarded
    def has_vector_index(self) -> bool:
        chunks = self.tables.chunks()
        return chunks is not None and vector_index(chunks) is not None

    @guarded
    def unindexed_rows(self) -> int:
        chunks = self.tables.chunks()
        if chunks is None:
            return 0
        for index in chunks.list_indices():
            if index.index_type == "FTS":
                stats = chunks.index_stats(index.name)
                return int(stats.num_unindexed_rows) if stats else 0
        return chunks.count_rows()
