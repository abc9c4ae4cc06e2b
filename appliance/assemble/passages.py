"""Fused candidates -> the response: hits, each parent section once, citations."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from appliance.assemble.paging import REPLY_BUDGET_CHARS, json_chars
from appliance.chunks import Chunk, RankedChunk, StoredChunk
from appliance.ingest.chunk import section_text
from appliance.results import Hit, Place, RankedHit, SearchResults, SourceRef, Trimmed

SectionsMode = Literal["excerpt", "full", "none"]
EXCERPT_CONTEXT_CHARS = 300
"""Characters of a section kept either side of its hits in the default reply (sections "excerpt").
On the 69 questions of scripts/bench_answers.py the answer stayed in 49 replies of median 19.3 K
characters (hits repeated in their sections, 400 either side: 49, 26.7 K; whole sections: 52, 44.0 K)."""
RANK_COLUMNS = ["id", "source_id", "parent_id"]
"""What the ranked lists read: enough to group and cap by source and to read the hits' sections. Not the
text: fusion asks each candidate's language by id (IndexReader.passage_languages), and only the hits are
read whole. With the text, ~450 candidates' passages were read and copied into Python at every query."""


def passage(chunk: StoredChunk) -> Hit:
    """What a hit says of its chunk (a search hit adds its ranking and the places of its copies)."""
    dated = chunk.snapshot_date or None
    return Hit(file_path=chunk.source_id if chunk.source_kind == "file" else None, source=chunk.source_id,
               source_kind=chunk.source_kind, display_path=chunk.path, title=chunk.title or None,
               chunk_index=chunk.chunk_index, text=chunk.text, parent_id=chunk.parent_id,
               heading=chunk.heading or None, start_line=chunk.start_line, end_line=chunk.end_line,
               page_start=chunk.page_start, page_end=chunk.page_end, slide=chunk.slide,
               sheet=chunk.sheet or None, doc_class=chunk.doc_class or None, snapshot_date=dated,
               also_unchanged_on=list(chunk.also_unchanged_on or []) if dated else None)


def within_budget(result: SearchResults, budget: int = REPLY_BUDGET_CHARS) -> SearchResults:
    """Keep the whole answer, as the JSON a client receives, under `budget` characters: parent
    sections of the lowest-ranked hits go first, then the lowest-ranked hits themselves; the reply
    says what was left out and how to get it."""
    results, parents = list(result.results), dict(result.parents)
    envelope = json_chars(result.model_copy(update={"results": [], "parents": {}, "sources": []})) + _TRIMMED_NOTE_CHARS
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
    trimmed = Trimmed(budget_chars=budget, parents_omitted=parents_dropped, hits_omitted=hits_dropped, note=(
        "The reply was cut to its text budget: hits without their section in parents can be read with "
        "read_chunk_neighbors or read_file; ask with a smaller topK for every section."))
    return result.model_copy(update={"results": results, "parents": parents, "trimmed": trimmed,
                                     "sources": [s for s in result.sources if s.source in kept]})


_TRIMMED_NOTE_CHARS = 400
"""Room kept for the `trimmed` note itself."""


def assemble(query: str, hits: Sequence[RankedChunk], sections: Sequence[StoredChunk], *,
             also_in: dict[str, list[Place]] | None = None, also_in_more: dict[str, int] | None = None,
             mode: SectionsMode = "excerpt") -> SearchResults:
    """Hits in fused order; `parents` maps each parentId once to its section (from `sections`, the
    chunks of the hits' sections): whole (`mode` "full"), only the part around its hits ("excerpt",
    `excerpted` names those cut) or not at all ("none"); a hit whose passage was also found elsewhere
    names those places in `alsoIn`, and how many more there were (`also_in_more`) in `alsoInMore`."""
    by_parent: dict[str, list[StoredChunk]] = defaultdict(list)
    for chunk in sections:
        by_parent[chunk.parent_id].append(chunk)
    wanted = {h.chunk.parent_id for h in hits}
    parents, excerpted = {}, []
    for pid, chunks in by_parent.items():
        if pid not in wanted or mode == "none":
            continue
        chunks.sort(key=lambda c: c.chunk_index)
        around = {h.chunk.chunk_index for h in hits if h.chunk.parent_id == pid} if mode == "excerpt" else None
        parents[pid], cut = section_excerpt([c.to_chunk() for c in chunks], around)
        if cut:
            excerpted.append(pid)
    results, sources, seen = [], [], set()
    for hit in hits:
        chunk = hit.chunk
        results.append(RankedHit(**passage(chunk).model_dump(exclude={"also_in"}), also_in=(also_in or {}).get(hit.id),
                                 also_in_more=(also_in_more or {}).get(hit.id),
                                 score=round(hit.score, 6),
                                 distance=None if hit.distance is None else round(hit.distance, 6)))
        if chunk.source_id not in seen:
            seen.add(chunk.source_id)
            sources.append(SourceRef(source=chunk.source_id, display_path=chunk.path, title=chunk.title or None,
                                     source_kind=chunk.source_kind))
    return SearchResults(query=query, results=results, parents=parents, sources=sources, sections=mode,
                         excerpted=sorted(excerpted) if mode == "excerpt" else None)


def section_excerpt(chunks: Sequence[Chunk], around: set[int] | None,
                    context: int = EXCERPT_CONTEXT_CHARS) -> tuple[str, bool]:
    """(The section's text, whether it was cut): whole when `around` is None; else its label and the
    stretch from `context` characters before the first chunk numbered in `around` to `context` after
    the last, cut at a word boundary and marked with [...] where text is left out. The hits' own
    chunks are not repeated (their text is in the reply's results): "[hit chunk N]" stands in for each."""
    whole = section_text(chunks)
    if around is None:
        return whole, False
    ordered = sorted(chunks, key=lambda c: c.index)
    inside = [i for i, c in enumerate(ordered) if c.index in around]
    if not inside:
        return whole, False
    parts = [f"[hit chunk {c.index}]\n\n" if c.index in around else c.body for c in ordered]
    starts = [sum(len(p) for p in parts[:i]) for i in range(len(parts) + 1)]
    raw = "".join(parts)
    lo, hi = starts[inside[0]] - context, starts[inside[-1] + 1] + context
    body = "".join(c.body for c in ordered).strip()
    head = whole[:len(whole) - len(body)] if whole.endswith(body) else ""
    if lo > 0:
        space = raw.find(" ", lo, lo + 40)
        lo = space + 1 if space >= 0 else lo
    if hi < len(raw):
        space = raw.rfind(" ", hi - 40, hi)
        hi = space if space > 0 else hi
    text = raw[max(lo, 0):min(hi, len(raw))].strip()
    return head + ("[...] " if lo > 0 else "") + text + (" [...]" if hi < len(raw) else ""), True
