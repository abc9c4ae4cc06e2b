#!/usr/bin/env python3
"""How alike unrelated passages and re-cut copies of one passage are (the SAME_PASSAGE threshold).

Usage: distinct_threshold.py   (reads $MINIRAG_SHARED/eval/retrieval/scifact/corpus.jsonl)

Prints the largest word-3-gram containment of each of 3,000 SciFact abstracts in any other
abstract (unrelated passages on close topics), and the containment of copies of an abstract
re-cut 15% later and ending 15% earlier with 3% of words damaged (two conversions of one text).
"""
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
from appliance.query.distinct import MIN_SHINGLES, shingles

docs = [json.loads(l) for l in open(SHARED / "eval/retrieval/scifact/corpus.jsonl", encoding="utf-8")]
random.seed(1)
docs = random.sample(docs, 3000)
sh = [shingles(d["title"] + " " + d["text"]) for d in docs]
index = {}
for i, s in enumerate(sh):
    for g in s:
        index.setdefault(g, []).append(i)
best = []
for i, s in enumerate(sh):
    if len(s) < MIN_SHINGLES: continue
    counts = {}
    for g in s:
        for j in index[g]:
            if j != i: counts[j] = counts.get(j, 0) + 1
    m = max((c / min(len(s), len(sh[j])) for j, c in counts.items()), default=0.0)
    best.append(m)
best.sort()
n = len(best)
print("docs", n, "max containment vs any other doc: p50 %.3f p99 %.3f p99.9 %.3f max %.3f" % (best[n//2], best[int(n*.99)], best[int(n*.999)], best[-1]))
print(">=0.8:", sum(b >= 0.8 for b in best), ">=0.5:", sum(b >= 0.5 for b in best))
# the same passage re-cut: a window shifted by 15%, with line breaks and hyphen noise
rng = random.Random(2); scores = []
for d in random.sample(docs, 500):
    w = (d["title"] + " " + d["text"]).split()
    if len(w) < 60: continue
    a = w[: int(len(w) * .85)]; b = w[int(len(w) * .15):]
    b = [x if rng.random() > .03 else x[: len(x)//2] for x in b]
    sa, sb = shingles(" ".join(a)), shingles(" ".join(b))
    small, large = (sa, sb) if len(sa) <= len(sb) else (sb, sa)
    scores.append(len(small & large) / len(small))
scores.sort()
print("re-cut copies (15%% shifted, 3%% words damaged): p5 %.3f p50 %.3f min %.3f" % (scores[len(scores)//20], scores[len(scores)//2], scores[0]))
