"""Hybrid search over the index (vector and BM25 fused), and its answer as one Markdown block."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import get_args

from appliance.assemble.distinct import COPIES_LISTED, Shingles, distinct, place, shingled
from appliance.assemble.passages import RANK_COLUMNS, SectionsMode, assemble, within_budget
from appliance.chunks import RankedChunk
from appliance.config import TOP_K_CAP
from appliance.core import Resources
from appliance.errors import ApplianceError, InvalidArgument
from appliance.ingest.discover import contained_root
from appliance.languages import language
from appliance.results import SearchMarkdown, SearchResults
from appliance.search import crosslingual
from appliance.search.explaining import explained
from appliance.search.fusion import cap_distance, cap_files, fuse, group_cut
from appliance.search.keywords import query_terms
from appliance.storage.filters import Filter
from appliance.storage.sides import Side

MAX_QUERY_CHARS = 4000

_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bm25")
"""Runs each query's BM25 side beside its vector side; one pool per process (a thread per query cost ~1 ms)."""


def search(core: Resources, query: str, *, top_k: int = 10, scope: str | None = None,
           doc_class: str | None = None, sections: SectionsMode = "excerpt", explain: bool = False) -> SearchResults:
    """Hybrid search: vector and BM25 in parallel, fused by normalised scores (search.fusion.fuse);
    `sections` says how much of each hit's section the answer carries (query.assemble); `explain` adds
    to each hit why it came back (explaining.explain)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgument("The query is empty", hint="Ask with a few words or an exact identifier.")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(f"The query is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InvalidArgument(f"topK must be at least 1, not {top_k!r}")
    if sections not in get_args(SectionsMode):
        raise InvalidArgument(f"sections must be one of {', '.join(get_args(SectionsMode))}, not {sections!r}")
    top_k = min(top_k, TOP_K_CAP)
    core.require_identity()
    with core.index.reader.query_view():  # the latest commit, and one version for every read of the query
        return _search(core, query, top_k, scope, doc_class, sections, explain)


CANDIDATES_PER_SIDE = 150
"""Candidates each side reads before fusion. In a long manual the file is found but its answering
passage sat below the 40 read before: 150 lifts answer-passage hit@5 on our manuals set from 0.53
to 0.59 (300 no better) and leaves SciFact, Cranfield and XQuAD-R as they were
(scripts/passage_experiments.py, README "Retrieval quality")."""


def candidate_depth(top_k: int) -> int:
    """How many candidates each side reads for a query that asks `top_k` hits."""
    return max(top_k * 4, CANDIDATES_PER_SIDE)


def _search(core: Resources, query: str, top_k: int, scope: str | None, doc_class: str | None,
            sections: SectionsMode, explain: bool = False) -> SearchResults:
    where = _filters(core, scope, doc_class)
    fetch = candidate_depth(top_k)
    weight = core.settings.hybrid_weight
    keyword_future = translated_future = None
    # Keyword-alone, BM25 searches the translations with the query's own words. Fused, the question's own
    # BM25 judges passages in its language only and the translations alone judge the others (search.fusion):
    # mixing them in one list shrank the own language's scale (XQuAD-R multi -0.013 nDCG@10; README).
    alone, query_language = weight >= 1.0, language(query)
    columns = core.index.reader.rank_columns(RANK_COLUMNS)
    # where LanceDB ranks, BM25's rows bring their vectors too, for fusion's tie-break (a read by id costs ~9 ms
    # at 1M chunks; carried, nothing measurable)
    keyword_columns = [*columns, "vector"] if "text" in columns else columns
    translate = alone or (weight > 0.0 and query_language is not None)
    keywords = crosslingual.build(query, translate=translate) if translate or explain else None
    if weight > 0.0:
        # the query's own terms as built once with the sets (KeywordQuery.plain is query_terms(query))
        terms = query_terms(query) if keywords is None else keywords.fts() if alone else keywords.plain
        keyword_future = _KEYWORD_POOL.submit(core.index.reader.keyword_side, terms, fetch, where, keyword_columns)
        if keywords is not None and not alone and (wanted := keywords.translations()):
            # it judges only passages in another language than the question's (search.fusion): searched there alone
            translated_future = _KEYWORD_POOL.submit(core.index.reader.keyword_side, wanted, fetch, where,
                                                     keyword_columns, query_language)
    vector = core.embedder.embed_query(query)
    vector_side = core.index.reader.vector_side(vector, fetch, where, columns)
    keyword_side = keyword_future.result() if keyword_future else Side([], 0.0, 0.0)
    translated = None
    if translated_future is not None:
        found_translated = translated_future.result()  # scaled by its best among them (search.fusion)
        translated = Side(found_translated.rows, found_translated.best, 0.0)
    carried = {r["id"]: r["vector"] for r in [*keyword_side.rows, *(translated.rows if translated else ())]
               if r.get("vector") is not None}
    fused = fuse(vector_side, keyword_side, weight, query_language,
                 lambda ids: core.index.reader.similarities(vector, ids, carried), translated,
                 lambda rows: core.index.reader.passage_languages(rows, language))
    fused = cap_distance(fused, core.settings.max_distance)
    fused = group_cut(fused, core.settings.grouping)
    # Twice the hits asked for, so near-identical passages can collapse and still leave top_k distinct ones;
    # when copies fill even that (a passage kept in many files), twice as many again, while there are more.
    # Copies are told apart by the passages the ranked lists carry (or the replica holds); only then are the
    # rows read whole: the sections of the hits kept (every hit lies inside its own) and the places of their
    # best-ranked copies (COPIES_LISTED).
    pool = cap_files(fused, core.settings.max_files)
    width = top_k * 2
    grams: dict[str, Shingles] = {}
    by_text: dict[str, Shingles] = {}
    while True:
        ranked = pool[:width]
        grams |= shingled(core.index.reader.passage_bodies([h.row for h in ranked if h.id not in grams]), by_text)
        kept, copies = distinct([h.id for h in ranked if h.id in grams], grams, top_k)
        if len(kept) >= top_k or width >= len(pool):
            break
        width *= 2
    by_id = {h.id: h for h in ranked}
    listed = {k: copies[k][:COPIES_LISTED] for k in copies}
    chunks = core.index.reader.section_chunks(sorted({by_id[k].row["parent_id"] for k in kept}),
                                              sorted({c for cs in listed.values() for c in cs}))
    full = {chunk.id: chunk for chunk in chunks}
    hits = [RankedChunk(full[k], by_id[k].distance, by_id[k].score) for k in kept if k in full]
    more = {k: len(copies[k]) - len(cs) for k, cs in listed.items() if len(copies[k]) > len(cs)}
    answer = assemble(query, hits, chunks, mode=sections, also_in_more=more,
                      also_in={k: [place(full[c]) for c in cs if c in full] for k, cs in listed.items()})
    if keywords is not None and explain:
        answer = explained(answer, hits, {c.id: c for c in fused}, keywords)
    return within_budget(answer)


def _filters(core: Resources, scope: str | None, doc_class: str | None) -> Filter | None:
    prefix = scope_prefix(core, scope) if scope else None
    if doc_class:
        known = {s.doc_class for s in core.index.registry.source_rows()} | {"note"}
        if doc_class not in known:
            raise InvalidArgument(f"Unknown doc class {doc_class!r}",
                                  hint="Known classes: " + ", ".join(sorted(known)))
    return Filter(prefix, doc_class or None) if prefix is not None or doc_class else None


def scope_prefix(core: Resources, scope: str) -> str:
    """The source-id prefix of a scope; it matches at a separator: /docs/proj never matches /docs/project-x."""
    if not isinstance(scope, str) or not scope.strip() or "\x00" in scope:
        raise InvalidArgument("scope must be a non-empty path or source-id prefix")
    if scope.startswith("/") or scope.startswith("~"):
        path = Path(os.path.normpath(Path(scope).expanduser()))
        roots = core.settings.roots
        if contained_root(path, roots) is None and contained_root(path.resolve(), roots) is None \
                and not any(r.is_relative_to(path) for r in roots):
            raise InvalidArgument(f"scope {scope!r} is outside the configured document roots")
        prefix = str(path)
    else:
        prefix = scope.rstrip("/") or scope
    return prefix.rstrip("/") if len(prefix) > 1 else prefix


def gather(core: Resources, query: str, *, top_k: int = 10, scope: str | None = None, doc_class: str | None = None,
           context_lines: int = 3) -> SearchMarkdown:
    """`search`'s answer as one Markdown block (query.gather): numbered hits with their citations
    and, for text files, `context_lines` lines of the file around each passage."""
    from appliance.assemble.gather import MAX_CONTEXT_LINES, render_markdown
    from appliance.ingest.textfile import read_text

    if isinstance(context_lines, bool) or not isinstance(context_lines, int) \
            or not 0 <= context_lines <= MAX_CONTEXT_LINES:
        raise InvalidArgument(
            f"contextLines must be an integer from 0 to {MAX_CONTEXT_LINES}, not {context_lines!r}")
    answer = search(core, query, top_k=top_k, scope=scope, doc_class=doc_class)

    def read_lines(path: str) -> list[str] | None:
        try:
            target, _root = core.resolve(path)
            if target.stat().st_size > core.settings.max_file_size:
                return None
            return read_text(target)[0].splitlines()
        except (ApplianceError, OSError, ValueError):
            return None

    return SearchMarkdown(query=answer.query, result_count=len(answer.results),
                          markdown=render_markdown(answer, context_lines=context_lines, read_lines=read_lines))
