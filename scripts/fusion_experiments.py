#!/usr/bin/env python3
"""Fusion rules measured offline on stored candidate lists: nDCG@10 and Recall@10 per rule per dataset.

Usage: fusion_experiments.py [--datasets xquad-multi,scifact,...] [--fetch 160] [--json]

Each query runs ONCE through the real pipeline's two sides, as `Appliance.search`
runs them: `IndexReader.vector_search` with `embedder.embed_query(query)` and
`IndexReader.keyword_search` with `keywords.query_terms(query)`, each for the top
`--fetch` chunks (160 = what `search(top_k=40)` fetches, as eval_retrieval.py
asks) with their raw `_distance` / `_score`. The lists are stored as JSON under
.cache/eval/candidates/ and every fusion rule is then evaluated in pure Python
on them (chunks ranked, then reduced to documents in rank order, as
eval_retrieval.py does; the near-duplicate collapse is not replayed).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_retrieval as ev

from appliance.assemble.passages import RANK_COLUMNS
from appliance.languages import language
from appliance.search import fusion as hybrid
from appliance.search.keywords import analyze, query_terms
from appliance.storage.sides import Side

Hit = list  # [chunk id, document id, raw value]
Query = dict  # {"text", "terms", "v": [Hit], "k": [Hit]}


def collect(dataset: str, fetch: int) -> dict:
    """The stored candidate lists of every query (computed and stored on first use)."""
    corpus, queries, qrels = ev.load(dataset, None)
    path = ev.CACHE / "candidates" / f"{dataset}-{fetch}.json"
    docs = {d["_id"]: doc_features(f"{d.get('title') or ''}\n\n{d['text']}") for d in corpus}
    if path.exists():
        return {**json.loads(path.read_text("utf-8")), "docs": docs}
    app, info = ev.open_app(dataset, corpus)
    out: dict = {"info": info, "fetch": fetch, "qrels": qrels, "queries": {}}
    started = time.perf_counter()
    for qid, text in queries.items():
        terms = query_terms(text)
        vector = app.resources.embedder.embed_query(text)
        v = app.index.reader.vector_search(vector, fetch, None, RANK_COLUMNS)
        k = app.index.reader.keyword_search(terms, fetch, None, RANK_COLUMNS) if terms else []
        out["queries"][qid] = {"text": text, "terms": terms,
                               "v": [[r["id"], Path(r["source_id"]).stem, round(r["_distance"], 6)] for r in v],
                               "k": [[r["id"], Path(r["source_id"]).stem, round(r["_score"], 5)] for r in k]}
    out["info"]["candidateSeconds"] = round(time.perf_counter() - started, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out), "utf-8")
    return {**out, "docs": docs}


_CYR = re.compile(r"[\u0400-\u04ff]")


def doc_features(text: str) -> dict:
    return {"lang": language(text), "script": script(text), "terms": sorted(set(analyze(text))),
            "text": text[:400]}


# ---- fusion rules: (query, docs) -> chunk ids in fused order ----

def by_score(scores: dict[str, float], q: Query) -> list[str]:
    """Chunks by score; ties keep the vector side's order, then the keyword side's."""
    order = {cid: i for i, cid in enumerate(dict.fromkeys([h[0] for h in q["v"]] + [h[0] for h in q["k"]]))}
    return sorted(scores, key=lambda c: (-scores[c], order[c]))


def minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(x - lo) / (hi - lo) if hi > lo else 1.0 for x in values]


def norm_bm25(scores: list[float], how: str) -> list[float]:
    if not scores:
        return []
    if how == "max":
        return [s / scores[0] for s in scores] if scores[0] > 0 else [0.0] * len(scores)
    if how == "minmax":
        return minmax(scores)
    mu, sd = statistics.fmean(scores), (statistics.pstdev(scores) or 1.0)  # "z3": mu +- 3 sd onto 0..1
    return [min(1.0, max(0.0, (s - (mu - 3 * sd)) / (6 * sd))) for s in scores]


def convex(alpha: float, vnorm: str, bnorm: str, gate: Callable[[Query, dict, float], float] | None = None):
    """(1 - a) * vector + a * bm25, each normalised per query; absent = 0.
    vnorm 'sim' = cosine similarity as is, 'minmax' over the vector list; bnorm see norm_bm25.
    `gate(q, docs, a)` may lower a per query (BM25's confidence)."""
    def rule(q: Query, docs: dict) -> list[str]:
        return by_score(convex_scores(q, gate(q, docs, alpha) if gate else alpha, vnorm, bnorm), q)
    return rule


def convex_scores(q: Query, a: float, vnorm: str, bnorm: str) -> dict[str, float]:
    """Every candidate's (1 - a) * vector + a * bm25 (see convex)."""
    sims = [1.0 - h[2] for h in q["v"]]
    v = dict(zip((h[0] for h in q["v"]), minmax(sims) if (vnorm == "minmax" and sims) else sims, strict=True))
    b = dict(zip((h[0] for h in q["k"]), norm_bm25([h[2] for h in q["k"]], bnorm), strict=True))
    return {c: (1 - a) * v.get(c, 0.0) + a * b.get(c, 0.0) for c in {**v, **b}}


RRF_K = 60


def rrf(weight: float, k: int = RRF_K):
    """Weighted reciprocal rank fusion, the rule before this study: (1 - w)/(k + vr + 1) + w/(k + kr + 1)."""
    def rule(q: Query, docs: dict) -> list[str]:
        scores: dict[str, float] = {h[0]: (1 - weight) / (k + r + 1) for r, h in enumerate(q["v"])}
        for r, h in enumerate(q["k"]):
            scores[h[0]] = scores.get(h[0], 0.0) + weight / (k + r + 1)
        return by_score(scores, q)
    return rule


def shipped(weight: float):
    """appliance.search.fusion.fuse itself, rows carrying their document's text."""
    def rule(q: Query, docs: dict) -> list[str]:
        v = [{"id": h[0], "_distance": h[2], "text": docs[h[1]]["text"]} for h in q["v"]]
        k = [{"id": h[0], "_score": h[2], "text": docs[h[1]]["text"]} for h in q["k"]]
        sides = Side.of(v, "_distance"), Side.of(k, "_score")
        return [c.id for c in hybrid.fuse(*sides, weight, language(q["text"]))]
    return rule


def rrf_scaled(weight: float, k: int = RRF_K):
    """RRF whose keyword vote is scaled by the hit's BM25 score relative to the top one."""
    def rule(q: Query, docs: dict) -> list[str]:
        scores: dict[str, float] = {h[0]: (1 - weight) / (k + r + 1) for r, h in enumerate(q["v"])}
        top = q["k"][0][2] if q["k"] else 1.0
        for r, h in enumerate(q["k"]):
            scores[h[0]] = scores.get(h[0], 0.0) + weight * (h[2] / top) / (k + r + 1)
        return by_score(scores, q)
    return rule


def script(text: str) -> str:
    """Cyrillic or Latin, by the majority of letters: the cheapest language signal there is."""
    letters = [c for c in text if c.isalpha()]
    return "cyrillic" if sum(bool(_CYR.match(c)) for c in letters) * 2 > len(letters) else "latin"


def abstain(alpha: float, vnorm: str, bnorm: str, same: Callable[[Query, dict, str], bool]):
    """Convex, but BM25 abstains on documents it cannot judge (`same` is False): there the
    vector score stands alone instead of being diluted by an absent BM25 score."""
    def rule(q: Query, docs: dict) -> list[str]:
        sims = [1.0 - h[2] for h in q["v"]]
        v = dict(zip((h[0] for h in q["v"]), minmax(sims) if (vnorm == "minmax" and sims) else sims, strict=True))
        b = dict(zip((h[0] for h in q["k"]), norm_bm25([h[2] for h in q["k"]], bnorm), strict=True))
        doc_of = {h[0]: h[1] for h in q["v"] + q["k"]}
        return by_score({c: (1 - alpha) * v.get(c, 0.0) + alpha * b.get(c, 0.0) if same(q, docs, doc_of[c])
                         else v.get(c, 0.0) for c in {**v, **b}}, q)
    return rule


def same_language(q: Query, docs: dict, doc: str) -> bool:
    ql, dl = language(q["text"]), docs[doc]["lang"]
    return ql is None or dl is None or ql == dl


def same_script(q: Query, docs: dict, doc: str) -> bool:
    return docs[doc]["script"] == script(q["text"])


def absent_abstain(alpha: float, vnorm: str, bnorm: str):
    """BM25 abstains on documents it did not return at all (no shared term, or past its top)."""
    def rule(q: Query, docs: dict) -> list[str]:
        found = {h[1] for h in q["k"]}
        return abstain(alpha, vnorm, bnorm, lambda q, d, doc: doc in found)(q, docs)
    return rule


def sibling_evidence(alpha: float, mu: float):
    """convex minmax/max, plus `mu` x the best score of another chunk of the same document: passage
    evidence backed by its document (tried for SciFact's multi-chunk abstracts; it did not help)."""
    def rule(q: Query, docs: dict) -> list[str]:
        doc_of = {h[0]: h[1] for h in q["v"] + q["k"]}
        base = convex_scores(q, alpha, "minmax", "max")
        per_doc: dict[str, list[float]] = {}
        for c, x in base.items():
            per_doc.setdefault(doc_of[c], []).append(x)
        def sibling(c: str) -> float:
            rest = sorted(per_doc[doc_of[c]], reverse=True)
            rest.remove(base[c])
            return rest[0] if rest else 0.0
        return by_score({c: x + mu * sibling(c) for c, x in base.items()}, q)
    return rule


def coverage(q: Query, docs: dict) -> float:
    """Share of the query's terms that the best BM25 hit contains."""
    terms = q["terms"].split()
    if not terms or not q["k"]:
        return 0.0
    have = set(docs[q["k"][0][1]]["terms"])
    return sum(t in have for t in terms) / len(terms)


def gap(q: Query) -> float:
    """1 - second/top BM25 score: how clearly BM25 prefers its best hit."""
    s = [h[2] for h in q["k"]]
    return 1.0 - s[1] / s[0] if len(s) > 1 and s[0] > 0 else (1.0 if s else 0.0)


IDENT = re.compile(r"""(?x) "[^"]+" | \b\w*_\w+\b | \b(?=\w*\d)(?=\w*[^\W\d])\w{4,}\b | \b[a-z]+[A-Z]\w*\b
                       | \w+(?:\.\w+){2,} | \w+::\w+ | \w+\(\)""")


def has_identifier(text: str) -> bool:
    return bool(IDENT.search(text))


def query_dependent(base: float, ident: float, make: Callable[[float], Callable]):
    def rule(q: Query, docs: dict) -> list[str]:
        return make(ident if has_identifier(q["text"]) else base)(q, docs)
    return rule


def rules() -> dict[str, Callable]:
    out: dict[str, Callable] = {}
    for w in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0):
        out[f"rrf w={w}"] = rrf(w)
    for w in (0.3, 0.5, 0.6):
        out[f"rrf k=10 w={w}"] = rrf(w, 10)
    for w in (0.3, 0.5, 0.6, 0.8):
        out[f"rrf bm25-scaled w={w}"] = rrf_scaled(w)
    for vn in ("sim", "minmax"):
        for bn in ("max", "minmax", "z3"):
            for a in ((0.1, 0.3, 0.5) if vn == "sim" else (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)):
                out[f"convex {vn}/{bn} a={a}"] = convex(a, vn, bn)
    for a in (0.3, 0.5):
        out[f"convex minmax/minmax a={a} x gap"] = convex(a, "minmax", "minmax", lambda q, d, a: a * gap(q))
        out[f"convex minmax/minmax a={a} x coverage"] = convex(a, "minmax", "minmax",
                                                               lambda q, d, a: a * coverage(q, d))
        out[f"convex sim/max a={a} x coverage"] = convex(a, "sim", "max", lambda q, d, a: a * coverage(q, d))
    for vn, bn in (("sim", "max"), ("sim", "minmax"), ("minmax", "minmax"), ("minmax", "max")):
        for a in ((0.2, 0.5) if vn == "sim" else (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)):
            out[f"lang-abstain {vn}/{bn} a={a}"] = abstain(a, vn, bn, same_language)
        out[f"script-abstain {vn}/{bn} a=0.3"] = abstain(0.3, vn, bn, same_script)
        out[f"absent-abstain {vn}/{bn} a=0.3"] = absent_abstain(0.3, vn, bn)
    for base in (0.2, 0.3):
        out[f"ident-aware convex minmax/minmax a={base}|0.8"] = query_dependent(
            base, 0.8, lambda a: convex(a, "minmax", "minmax"))
    out["rrf ident-aware w=0.3|0.8"] = query_dependent(0.3, 0.8, rrf)
    for mu in (0.1, 0.2, 0.3):
        out[f"sibling-evidence minmax/max a=0.6 mu={mu}"] = sibling_evidence(0.6, mu)
    for w in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        out[f"shipped fuse w={w}"] = shipped(w)
    return out


def score(data: dict, rule: Callable) -> tuple[float, float]:
    ndcgs, recalls = [], []
    for qid, q in data["queries"].items():
        doc_of = {h[0]: h[1] for h in q["v"] + q["k"]}
        ranked = list(dict.fromkeys(doc_of[c] for c in rule(q, data["docs"])))
        n, r = ev.ndcg_recall(ranked, data["qrels"][qid])
        ndcgs.append(n)
        recalls.append(r)
    return statistics.fmean(ndcgs), statistics.fmean(recalls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(ev.DATASETS))
    parser.add_argument("--fetch", type=int, default=160)
    parser.add_argument("--rules", default="", help="only rules whose name contains this")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = args.datasets.split(",")
    data = {d: collect(d, args.fetch) for d in names}
    table = {name: {d: [round(x, 4) for x in score(data[d], rule)] for d in names}
             for name, rule in rules().items() if args.rules in name}
    if args.json:
        print(json.dumps(table, indent=2))
        return
    short = [d.replace("xquad-", "xq-") for d in names]
    print(f"{'rule (nDCG@10 / Recall@10)':44}" + "".join(f"{s:>14}" for s in short) + f"{'min Δvec':>9}")
    vec = table.get("rrf w=0.0")
    for name, row in table.items():
        worst = min(row[d][0] - vec[d][0] for d in names) if vec else 0.0
        print(f"{name:44}" + "".join(f"{row[d][0]:7.3f}/{row[d][1]:.3f}"[:14].rjust(14) for d in names)
              + f"{worst:+9.3f}")


if __name__ == "__main__":
    main()
