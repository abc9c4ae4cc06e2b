#!/usr/bin/env python3
"""What lifts the answer passage in long manuals: ranking variants measured on the manuals set.

Usage: passage_experiments.py [--variants base,depth100,...] [--json]

Each question's two sides are read once, deep (`DEEP` candidates each, the appliance's own
IndexReader.vector_side / keyword_side), and every variant re-ranks from them in process: the
candidate depth, evidence from the passage's section and its neighbours, pseudo-relevance
feedback on the keyword side. A variant's top 10 chunks are judged as eval_manuals judges a
reply (a chunk of the question's file whose text or parent section holds the snippet), so the
figures compare with `make eval`'s but need no server round trip per variant.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]

from eval_manuals import GROUPS, figures, normalise, open_manuals  # noqa: E402
from manuals_set import load_questions  # noqa: E402

from appliance.assemble.passages import RANK_COLUMNS  # noqa: E402
from appliance.ingest.chunk import section_text  # noqa: E402
from appliance.languages import language  # noqa: E402
from appliance.search import (  # noqa: E402
    crosslingual,
    fusion as hybrid,
)
from appliance.search.fusion import Candidate, fuse  # noqa: E402
from appliance.search.keywords import analyze, query_terms  # noqa: E402
from appliance.storage.sides import Side  # noqa: E402

DEEP = 300
COLUMNS = [*RANK_COLUMNS, "text", "chunk_index"]


def answering(app: Any, q: dict) -> set[str]:
    """The chunk ids that answer `q`: its file's chunks whose text or section holds the snippet."""
    chunks = app.index.reader.document_chunks(str(app.settings.roots[0] / q["file"]))
    snippet = normalise(q["snippet"])
    by_parent: dict[str, list[Any]] = defaultdict(list)
    for c in chunks:
        by_parent[c.parent_id].append(c)
    sections = {pid: normalise(section_text([c.to_chunk() for c in cs])) for pid, cs in by_parent.items()}
    return {c.id for c in chunks if snippet in normalise(c.text) or snippet in sections[c.parent_id]}


def cut(side: Side, depth: int, key: str) -> Side:
    """The side as a query at `depth` candidates would have read it."""
    rows = side.rows[:depth]
    return Side.of(rows, key)


def fused(data: dict, weight: float, depth: int, keyword: Side | None = None,
          translated: bool = False, keyword_depth: int | None = None) -> list[Candidate]:
    """The appliance's fusion of the stored sides read at `depth` (the keyword lists at `keyword_depth` when
    given); `translated`: with the translated list."""
    deep = depth if keyword_depth is None else keyword_depth
    vector = cut(data["vector"], depth, "_distance")
    kw = cut(keyword if keyword is not None else data["keyword"], deep, "_score")
    found = {r["id"] for r in vector.rows}
    sims = {i: s for i, s in {**data["sims"], **data["tsims"]}.items() if i not in found}
    words = Side(data["translated"].rows[:deep], cut(data["translated"], deep, "_score").best, 0.0) \
        if translated else None
    return fuse(vector, kw, weight, data["lang"], sims, words)


def section_evidence(cands: list[Candidate], share: float, how: str = "max") -> list[Candidate]:
    """Each candidate's score plus `share` x the best (`max`) or the summed (`sum`) scores of the
    other candidates of its section."""
    by_parent: dict[str, list[float]] = defaultdict(list)
    for c in cands:
        by_parent[c.row["parent_id"]].append(c.score)
    out = []
    for c in cands:
        others = list(by_parent[c.row["parent_id"]])
        others.remove(c.score)
        bonus = (max(others, default=0.0) if how == "max" else sum(others)) * share
        out.append(Candidate(c.id, c.row, c.distance, c.vector_rank, c.keyword_rank, c.score + bonus))
    return sorted(out, key=lambda c: (-c.score, c.id))


def with_neighbours(cands: list[Candidate], share: float) -> list[Candidate]:
    """Each candidate's score plus `share` x the best score of its two neighbouring chunks."""
    score = {(c.row["source_id"], c.row["chunk_index"]): c.score for c in cands}
    out = []
    for c in cands:
        key = c.row["source_id"], c.row["chunk_index"]
        near = max(score.get((key[0], key[1] - 1), 0.0), score.get((key[0], key[1] + 1), 0.0))
        out.append(Candidate(c.id, c.row, c.distance, c.vector_rank, c.keyword_rank, c.score + share * near))
    return sorted(out, key=lambda c: (-c.score, c.id))


def prf_terms(app: Any, data: dict, weight: float, depth: int, docs: int, terms: int) -> str:
    """The query's terms plus the `terms` most frequent new terms of the first `docs` fused hits
    (counted once per hit), each in at least two of them."""
    top = fused(data, weight, depth)[:docs]
    own = set(data["terms"].split())
    seen: Counter[str] = Counter()
    for c in top:
        seen.update(set(analyze(c.row["text"])) - own)
    extra = [t for t, n in seen.most_common() if n >= 2][:terms]
    return " ".join([*data["terms"].split(), *extra])


def with_translations(data: dict, weight: float, depth: int, share: float) -> list[Candidate]:
    """The default fusion with the translated keyword list judging passages in other languages
    (query.hybrid.fuse), a translated match weighed `share` of an own-language one."""
    saved, hybrid.TRANSLATED_SHARE = hybrid.TRANSLATED_SHARE, share
    try:
        return fused(data, weight, depth, translated=True)
    finally:
        hybrid.TRANSLATED_SHARE = saved


def pruned(app: Any, data: dict, weight: float, targets: int, least: float) -> list[Candidate]:
    """The translated fusion with each word's translations pruned to `targets` per language of at
    least `least` of the dictionary's evidence (crosslingual.MAX_TARGETS, MIN_WEIGHT)."""
    saved = crosslingual.MAX_TARGETS, crosslingual.MIN_WEIGHT
    crosslingual.MAX_TARGETS, crosslingual.MIN_WEIGHT = targets, least
    try:
        wanted = crosslingual.build(data["q"]["question"]).translations()
    finally:
        crosslingual.MAX_TARGETS, crosslingual.MIN_WEIGHT = saved
    side = app.index.reader.keyword_side(wanted, DEEP, None, COLUMNS) if wanted else Side([], 0.0, 0.0)
    found = {r["id"] for r in data["vector"].rows}
    sims = app.index.reader.similarities(app.resources.embedder.embed_query(data["q"]["question"]),
                                  [r["id"] for r in side.rows if r["id"] not in found])
    return fused({**data, "translated": side, "tsims": sims}, weight, 150, translated=True)


def carried_terms(question: str, how: str) -> dict[str, float]:
    """The translated terms plus the question's own terms of the words it does not read in its own
    language (`foreign`: an identifier, a name, an English command in a Russian question) or of every
    word (`all`)."""
    keywords = crosslingual.build(question)
    own = language(question)
    out = keywords.translations()
    for term_set in keywords.sets:
        if how == "all" or term_set.language != own:
            for m in term_set.members:
                if m.kind != "translation":
                    out[m.term] = max(out.get(m.term, 0.0), m.weight)
    return out


def carried(app: Any, data: dict, weight: float, how: str) -> list[Candidate]:
    wanted = carried_terms(data["q"]["question"], how)
    side = app.index.reader.keyword_side(wanted, DEEP, None, COLUMNS) if wanted else Side([], 0.0, 0.0)
    found = {r["id"] for r in data["vector"].rows}
    sims = app.index.reader.similarities(app.resources.embedder.embed_query(data["q"]["question"]),
                                  [r["id"] for r in side.rows if r["id"] not in found])
    return fused({**data, "translated": side, "tsims": sims}, weight, 150, translated=True)


def balanced(data: dict, weight: float, depth: int, per_language: int) -> list[Candidate]:
    """Vector candidates: the first `depth` plus the first `per_language` of each document language."""
    rows = list(data["vector"].rows[:depth])
    ids = {r["id"] for r in rows}
    counts: Counter[str | None] = Counter()
    for r in data["vector"].rows:
        lang = language(r.get("text") or "")
        counts[lang] += 1
        if counts[lang] <= per_language and r["id"] not in ids:
            rows.append(r)
            ids.add(r["id"])
    whole = cut(data["vector"], depth, "_distance")
    vector = Side(rows, whole.best, whole.floor)
    kw = cut(data["keyword"], depth, "_score")
    sims = {i: s for i, s in data["sims"].items() if i not in ids}
    return fuse(vector, kw, weight, data["lang"], sims)


def variants(app: Any, weight: float) -> dict[str, Callable[[dict], list[Candidate]]]:
    out: dict[str, Callable[[dict], list[Candidate]]] = {"base": lambda d: fused(d, weight, 40)}
    for depth in (20, 80, 150, 300):
        out[f"depth{depth}"] = lambda d, depth=depth: fused(d, weight, depth)
    for share in (0.1, 0.2, 0.3, 0.5):
        out[f"section-max{share}"] = lambda d, s=share: section_evidence(fused(d, weight, 40), s)
        out[f"section-sum{share}"] = lambda d, s=share: section_evidence(fused(d, weight, 40), s, "sum")
        out[f"neighbour{share}"] = lambda d, s=share: with_neighbours(fused(d, weight, 40), s)
        out[f"depth150+section-max{share}"] = lambda d, s=share: section_evidence(fused(d, weight, 150), s)
    for deep in (40, 80, 100):  # the keyword lists shallower than the vector side's 150
        out[f"keyword{deep}"] = lambda d, k=deep: fused(d, weight, 150, translated=True, keyword_depth=k)
    out["translated150"] = lambda d: fused(d, weight, 150, translated=True)
    for share in (0.5, 0.7, 0.8, 0.9, 1.0):
        out[f"translated{share}"] = lambda d, s=share: with_translations(d, weight, 150, s)
    for targets in (1, 2, 3, 5):
        for least in (0.05, 0.15, 0.3):
            out[f"prune{targets}x{least}"] = lambda d, t=targets, m=least: pruned(app, d, weight, t, m)
    for how in ("foreign", "all"):
        out[f"carry-{how}"] = lambda d, h=how: carried(app, d, weight, h)
    for n in (10, 30, 60):
        out[f"balanced{n}"] = lambda d, n=n: balanced(d, weight, 150, n)
    for docs, terms in ((3, 5), (5, 10), (10, 10)):
        out[f"prf{docs}x{terms}"] = lambda d, n=docs, t=terms: fused(
            d, weight, 40, app.index.reader.keyword_side(prf_terms(app, d, weight, 40, n, t), DEEP, None, COLUMNS))
    return out


def read_sides(app: Any, questions: list[dict]) -> list[dict]:
    out = []
    for q in questions:
        vector = app.resources.embedder.embed_query(q["question"])
        terms = query_terms(q["question"])
        vside = app.index.reader.vector_side(vector, DEEP, None, COLUMNS)
        kside = app.index.reader.keyword_side(terms, DEEP, None, COLUMNS) if terms else Side([], 0.0, 0.0)
        found = {r["id"] for r in vside.rows}
        sims = app.index.reader.similarities(vector, [r["id"] for r in kside.rows if r["id"] not in found])
        keywords = crosslingual.build(q["question"])
        wanted = keywords.translations()
        tside = app.index.reader.keyword_side(wanted, DEEP, None, COLUMNS) if wanted else Side([], 0.0, 0.0)
        tsims = app.index.reader.similarities(vector, [r["id"] for r in tside.rows if r["id"] not in found])
        out.append({"q": q, "vector": vside, "keyword": kside, "sims": sims, "terms": terms,
                    "translated": tside, "tsims": tsims,
                    "lang": language(q["question"]), "answers": answering(app, q)})
    return out


def judge(cands: list[Candidate], data: dict, root: Path) -> tuple[int | None, int | None]:
    top = cands[:10]
    wanted = str(root / data["q"]["file"])
    files = list(dict.fromkeys(c.row["source_id"] for c in top))
    file_rank = files.index(wanted) + 1 if wanted in files else None
    passage = next((i + 1 for i, c in enumerate(top) if c.id in data["answers"]), None)
    return file_rank, passage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--weight", type=float, default=None, help="hybrid weight (default: the appliance's)")
    parser.add_argument("--no-sync", action="store_true", help="read the index as it is (another sync runs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    app, _info = open_manuals(sync=not args.no_sync)
    weight = app.settings.hybrid_weight if args.weight is None else args.weight
    questions = load_questions()
    data = read_sides(app, questions)
    unanswerable = [d["q"]["id"] for d in data if not d["answers"]]
    if unanswerable:
        print(f"warning: no chunk answers {unanswerable}", file=sys.stderr)
    table = variants(app, weight)
    chosen = args.variants.split(",") if args.variants else list(table)
    root = app.settings.roots[0]
    results = {}
    for name in chosen:
        found = {d["q"]["id"]: judge(table[name](d), d, root) for d in data}
        results[name] = {g: figures([found[q["id"]] for q in questions if keep(q)]) for g, keep in GROUPS.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    groups = ["all", "en", "de", "ru", "cross-lingual", "same-language", "paraphrase"]
    print(f"{'variant':28} " + " ".join(f"{g[:13]:>13}" for g in groups) + "   (passage hit@5 / MRR@10)")
    for name, res in results.items():
        print(f"{name:28} " + " ".join(f"{res[g]['passageHit@5']:6.3f}/{res[g]['passageMRR@10']:6.3f}"
                                       for g in groups))


if __name__ == "__main__":
    main()
