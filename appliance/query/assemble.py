"""Fused candidates -> the response: hits, each parent section once, citations."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.ingest.chunk import section_text
from appliance.paging import REPLY_BUDGET_CHARS, json_chars
from appliance.query.hybrid import Candidate
from appliance.records import Chunk

HIT_COLUMNS = ["id", "source_id", "source_kind", "root", "path", "chunk_index", "text", "body_start",
               "title", "parent_id", "heading", "start_line", "end_line", "page_start", "page_end", "slide",
               "sheet", "doc_class", "ocr_engine",
               "snapshot_date", "also_unchanged_on"]
RANK_COLUMNS = ["id", "source_id", "parent_id", "text"]
"""What the two ranked lists read: enough to fuse (text: the passage's language), group and cap by source."""


def row_to_chunk(row: dict[str, Any]) -> Chunk:
    """Rebuild the chunker's record from a stored row (section ordinal is not needed here)."""
    return Chunk(index=int(row["chunk_index"]), section=0, text=row["text"],
                 body_start=int(row.get("body_start") or 0), start_line=row.get("start_line"),
                 end_line=row.get("end_line"), heading=row.get("heading") or "")


def hit_dict(row: dict[str, Any], *, distance: float | None = None, score: float | None = None) -> dict[str, Any]:
    """One chunk as the tools and `--json` show it."""
    is_file = row["source_kind"] == "file"
    out: dict[str, Any] = {
        "filePath": row["source_id"] if is_file else None,
        "source": row["source_id"],
        "sourceKind": row["source_kind"],
        "displayPath": row["path"],
        "title": row["title"] or None,
        "chunkIndex": int(row["chunk_index"]),
        "text": row["text"],
        "parentId": row["parent_id"],
        "heading": row["heading"] or None,
        "startLine": row.get("start_line"),
        "endLine": row.get("end_line"),
        "pageStart": row.get("page_start"),
        "pageEnd": row.get("page_end"),
        "slide": row.get("slide"),
        "sheet": row.get("sheet") or None,
        "docClass": row.get("doc_class") or None,
        "alsoIn": None,  # set by assemble when the passage was found elsewhere too; every key the wire has
    }
    if score is not None:
        out["score"] = round(score, 6)
        out["distance"] = None if distance is None else round(distance, 6)
    if row.get("snapshot_date"):
        out["snapshotDate"] = row["snapshot_date"]
        out["alsoUnchangedOn"] = list(row.get("also_unchanged_on") or [])
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


def assemble(query: str, hits: Sequence[Candidate], section_rows: Sequence[dict[str, Any]], *,
             also_in: dict[str, list[dict[str, Any]]] | None = None) -> SearchResult:
    """Hits in fused order; `parents` maps each parentId to its section text once; a hit whose
    passage was also found elsewhere names those places in `alsoIn`."""
    by_parent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in section_rows:
        by_parent[row["parent_id"]].append(row)
    parents = {}
    for pid, rows in by_parent.items():
        rows.sort(key=lambda r: r["chunk_index"])
        parents[pid] = section_text([row_to_chunk(r) for r in rows])
    results, sources, seen = [], [], set()
    for hit in hits:
        results.append(hit_dict(hit.row, distance=hit.distance, score=hit.score))
        if also_in and hit.id in also_in:
            results[-1]["alsoIn"] = also_in[hit.id]
        if hit.row["source_id"] not in seen:
            seen.add(hit.row["source_id"])
            sources.append({"source": hit.row["source_id"], "displayPath": hit.row["path"],
                            "title": hit.row["title"] or None, "sourceKind": hit.row["source_kind"]})
    wanted = {h.row["parent_id"] for h in hits}
    return SearchResult(query, results, {k: v for k, v in parents.items() if k in wanted}, sources)
