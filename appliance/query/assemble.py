"""Fused candidates -> the response: hits, each parent section once, citations."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from appliance.ingest.chunk import section_text
from appliance.paging import REPLY_BUDGET_CHARS, json_chars
from appliance.records import RankedChunk, StoredChunk
from appliance.results import RankedHit, SearchResults, SourceRef

RANK_COLUMNS = ["id", "source_id", "parent_id", "text"]
"""What the two ranked lists read: enough to fuse (text: the passage's language), group and cap by source."""


def passage(chunk: StoredChunk) -> dict[str, Any]:
    """What a hit says of its chunk, as the keyword arguments of a results.Hit or RankedHit."""
    out: dict[str, Any] = {
        "file_path": chunk.source_id if chunk.source_kind == "file" else None, "source": chunk.source_id,
        "source_kind": chunk.source_kind, "display_path": chunk.path, "title": chunk.title or None,
        "chunk_index": chunk.chunk_index, "text": chunk.text, "parent_id": chunk.parent_id,
        "heading": chunk.heading or None, "start_line": chunk.start_line, "end_line": chunk.end_line,
        "page_start": chunk.page_start, "page_end": chunk.page_end, "slide": chunk.slide,
        "sheet": chunk.sheet or None, "doc_class": chunk.doc_class or None}
    if chunk.snapshot_date:
        out |= {"snapshot_date": chunk.snapshot_date, "also_unchanged_on": list(chunk.also_unchanged_on or [])}
    return out


def within_budget(result: SearchResults, budget: int = REPLY_BUDGET_CHARS) -> SearchResults:
    """Keep the whole answer, as the JSON a client receives, under `budget` characters: parent
    sections of the lowest-ranked hits go first, then the lowest-ranked hits themselves; the reply
    says what was left out and how to get it."""
    results, parents = list(result.results), dict(result.parents)
    envelope = json_chars(replace(result, results=[], parents={}, sources=[])) + _TRIMMED_NOTE_CHARS
    hit_chars = [json_chars(h) + 1 for h in results]
    parent_chars = {pid: json_chars({pid: text}) for pid, text in parents.items()}
    source_chars = {s.source: json_chars(s) + 1 for s in result.sources}

    def size() -> int:
        kept = {h.source for h in results}
        return (envelope + sum(hit_chars[:len(results)]) + sum(parent_chars[p] for p in parents)
                + sum(c for source, c in source_chars.items() if source in kept))

    if size() <= budget:
        return result
    first_use: dict[str | None, int] = {}
    for rank, hit in enumerate(results):
        first_use.setdefault(hit.parent_id, rank)
    parents_dropped = hits_dropped = 0
    for pid in sorted(parents, key=lambda p: first_use.get(p, 0), reverse=True):
        if size() <= budget:
            break
        del parents[pid]
        parents_dropped += 1
    while size() > budget and len(results) > 1:
        results.pop()
        hits_dropped += 1
    kept = {h.source for h in results}
    return replace(result, results=results, parents=parents, sources=[s for s in result.sources if s.source in kept],
                   trimmed={"budgetChars": budget, "parentsOmitted": parents_dropped, "hitsOmitted": hits_dropped,
                            "note": "The reply was cut to its text budget: hits without their section in parents "
                                    "can be read with read_chunk_neighbors or read_file; ask with a smaller topK "
                                    "for every section."})


_TRIMMED_NOTE_CHARS = 400
"""Room kept for the `trimmed` note itself."""


def assemble(query: str, hits: Sequence[RankedChunk], sections: Sequence[StoredChunk], *,
             also_in: dict[str, list[dict[str, Any]]] | None = None) -> SearchResults:
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
        results.append(RankedHit(**passage(chunk), also_in=(also_in or {}).get(hit.id), score=round(hit.score, 6),
                                 distance=None if hit.distance is None else round(hit.distance, 6)))
        if chunk.source_id not in seen:
            seen.add(chunk.source_id)
            sources.append(SourceRef(source=chunk.source_id, display_path=chunk.path, title=chunk.title or None,
                                     source_kind=chunk.source_kind))
    wanted = {h.chunk.parent_id for h in hits}
    return SearchResults(query=query, results=results, parents={k: v for k, v in parents.items() if k in wanted},
                         sources=sources)
