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

from appliance.assemble.distinct import MIN_SHINGLES, shingles  # noqa: E402  (after the path above)

SHARED = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))


def unrelated(docs: list[dict[str, str]]) -> None:
    """Each abstract's largest containment in any other abstract."""
    sh = [shingles(d["title"] + " " + d["text"]) for d in docs]
    index: dict[str, list[int]] = {}
    for i, s in enumerate(sh):
        for g in s:
            index.setdefault(g, []).append(i)
    best = []
    for i, s in enumerate(sh):
        if len(s) < MIN_SHINGLES:
            continue
        counts: dict[int, int] = {}
        for g in s:
            for j in index[g]:
                if j != i:
                    counts[j] = counts.get(j, 0) + 1
        best.append(max((c / min(len(s), len(sh[j])) for j, c in counts.items()), default=0.0))
    best.sort()
    n = len(best)
    print("docs", n, f"max containment vs any other doc: p50 {best[n // 2]:.3f} p99 {best[int(n * .99)]:.3f} "
          f"p99.9 {best[int(n * .999)]:.3f} max {best[-1]:.3f}")
    print(">=0.8:", sum(b >= 0.8 for b in best), ">=0.5:", sum(b >= 0.5 for b in best))


def recut(docs: list[dict[str, str]]) -> None:
    """The same passage re-cut: a window shifted by 15%, with line breaks and hyphen noise."""
    rng = random.Random(2)
    scores = []
    for d in random.sample(docs, 500):
        w = (d["title"] + " " + d["text"]).split()
        if len(w) < 60:
            continue
        a = w[: int(len(w) * .85)]
        b = [x if rng.random() > .03 else x[: len(x) // 2] for x in w[int(len(w) * .15):]]
        sa, sb = shingles(" ".join(a)), shingles(" ".join(b))
        small, large = (sa, sb) if len(sa) <= len(sb) else (sb, sa)
        scores.append(len(small & large) / len(small))
    scores.sort()
    print(f"re-cut copies (15% shifted, 3% words damaged): p5 {scores[len(scores) // 20]:.3f} "
          f"p50 {scores[len(scores) // 2]:.3f} min {scores[0]:.3f}")


def main() -> None:
    with open(SHARED / "eval/retrieval/scifact/corpus.jsonl", encoding="utf-8") as lines:
        docs = [json.loads(line) for line in lines]
    random.seed(1)
    docs = random.sample(docs, 3000)
    unrelated(docs)
    recut(docs)


if __name__ == "__main__":
    main()
