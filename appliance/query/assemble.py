"""Fused candidates -> the response: hits, each parent section once, citations."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.ingest.chunk import section_text
from appliance.paging import REPLY_BUDGET_CHARS, json_chars
from appliance.records import RankedChunk, StoredChunk

RANK_COLUMNS = ["id", "source_id", "parent_id", "text"]
"""What the two ranked lists read: enough to fuse (text: the passage's language), group and cap by source."""


def hit_dict(chunk: StoredChunk, *, distance: float | None = None, score: float | None = None) -> dict[str, Any]:
    """One chunk as the tools and `--json` show it."""
    out: dict[str, Any] = {
        "filePath": chunk.source_id if chunk.source_kind == "file" else None,
        "source": chunk.source_id,
        "sourceKind": chunk.source_kind,
        "displayPath": chunk.path,
        "title": chunk.title or None,
        "chunkIndex": chunk.chunk_index,
        "text": chunk.text,
        "parentId": chunk.parent_id,
        "heading": chunk.heading or None,
        "startLine": chunk.start_line,
        "endLine": chunk.end_line,
        "pageStart": chunk.page_start,
        "pageEnd": chunk.page_end,
        "slide": chunk.slide,
        "sheet": chunk.sheet or None,
        "docClass": chunk.doc_class or None,
        "alsoIn": None,  # set by assemble when the passage was found elsewhere too; every key the wire has
    }
    if score is not None:
        out["score"] = round(score, 6)
        out["distance"] = None if distance is None else round(distance, 6)
    if chunk.snapshot_date:
        out["snapshotDate"] = chunk.snapshot_date
        out["alsoUnchangedOn"] = list(chunk.also_unchanged_on or [])
    return out


@dataclass
class SearchResult:
    query: str
    results: list[dict[str, Any]] = field(default_factory=list)
    parents: dict[str, str] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    trimmed: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"query": self.query, "results": self.results, "parents": self.parents, "sources": self.sources}
        if self.trimmed:
            out["trimmed"] = self.trimmed
        return out


def within_budget(result: SearchResult, budget: int = REPLY_BUDGET_CHARS) -> SearchResult:
    """Keep the whole answer, as the JSON a client receives, under `budget` characters: parent
    sections of the lowest-ranked hits go first, then the lowest-ranked hits themselves; the reply
    says what was left out and how to get it."""
    envelope = json_chars({**result.to_dict(), "results": [], "parents": {}, "sources": []}) + _TRIMMED_NOTE_CHARS
    hit_chars = [json_chars(h) + 1 for h in result.results]
    parent_chars = {pid: json_chars({pid: text}) for pid, text in result.parents.items()}
    source_chars = {s["source"]: json_chars(s) + 1 for s in result.sources}

    def size() -> int:
        kept = {h["source"] for h in result.results}
        return (envelope + sum(hit_chars[:len(result.results)]) + sum(parent_chars[p] for p in result.parents)
                + sum(c for source, c in source_chars.items() if source in kept))

    if size() <= budget:
        return result
    first_use: dict[str | None, int] = {}
    for rank, hit in enumerate(result.results):
        first_use.setdefault(hit.get("parentId"), rank)
    parents_dropped = hits_dropped = 0
    for pid in sorted(result.parents, key=lambda p: first_use.get(p, 0), reverse=True):
        if size() <= budget:
            break
        del result.parents[pid]
        parents_dropped += 1
    while size() > budget and len(result.results) > 1:
        result.results.pop()
        hits_dropped += 1
    kept = {h["source"] for h in result.results}
    result.sources = [s for s in result.sources if s["source"] in kept]
    result.trimmed = {"budgetChars": budget, "parentsOmitted": parents_dropped, "hitsOmitted": hits_dropped,
                      "note": "The reply was cut to its text budget: hits without their section in parents "
                              "can be read with read_chunk_neighbors or read_file; ask with a smaller topK for "
                              "every section."}
    return result


_TRIMMED_NOTE_CHARS = 400
"""Room kept for the `trimmed` note itself."""


def assemble(query: str, hits: Sequence[RankedChunk], sections: Sequence[StoredChunk], *,
             also_in: dict[str, list[dict[str, Any]]] | None = None) -> SearchResult:
    """Hits in fused order; `parents` maps each parentId to its section text once (from `sections`,
    the chunks of the hits' sections); a hit whose passage was also found elsewhere names those
    places in `alsoIn`."""
    by_parent: dict[str, list[StoredChunk]] = defaultdict(list)
    for chunk in sections:
        by_parent[chunk.parent_id].append(chunk)
    parents = {}
    for pid, chunks in by_parent.items():
        chunks.sort(key=lambda c: c.chunk_index)
        parents[pid] = section_text([c.to_chunk() for c in chunks])
    results, sources, seen = [], [], set()
    for hit in hits:
        chunk = hit.chunk
        results.append(hit_dict(chunk, distance=hit.distance, score=hit.score))
        if also_in and hit.id in also_in:
            results[-1]["alsoIn"] = also_in[hit.id]
        if chunk.source_id not in seen:
            seen.add(chunk.source_id)
            sources.append({"source": chunk.source_id, "displayPath": chunk.path,
                            "title": chunk.title or None, "sourceKind": chunk.source_kind})
    wanted = {h.chunk.parent_id for h in hits}
    return SearchResult(query, results, {k: v for k, v in parents.items() if k in wanted}, sources)
