"""The long-manual evaluation (scripts/eval_manuals.py): its judging of hits and its question set.

The figures come from a slow run over real manuals; a wrong judge would only show up as a wrong
number there, so the rules are pinned here: a hit answers when it is of the question's file and its
text or its parent section holds the snippet, whitespace aside.
"""
from __future__ import annotations

import fnmatch
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from eval_manuals import figures, grouped, normalise, ranks
from manuals_set import PACKAGES, load_questions

DOCS = Path("/docs")
QUESTION = {"id": "q", "question": "Wo liegt der Paketcache?", "lang": "de", "docLang": "en", "kind": "paraphrase",
            "file": "manual/guide.html", "snippet": "stored in the\n   /var/cache/apt/archives"}


def hit(file: str, text: str, parent: str = "p0") -> dict:
    return {"source": str(DOCS / file), "text": text, "parentId": parent}


def test_a_hit_whose_text_holds_the_snippet_answers_whitespace_aside() -> None:
    hits = [hit("other.html", "nothing"),
            hit("manual/guide.html", "packages are stored in the /var/cache/apt/archives")]
    assert ranks(hits, {}, QUESTION, DOCS) == (2, 2)


def test_a_hit_answers_when_only_its_parent_section_holds_the_snippet() -> None:
    hits = [hit("manual/guide.html", "a heading only", parent="s1"), hit("manual/guide.html", "x", parent="s2")]
    parents = {"s1": "intro", "s2": "All fetched packages are stored in the  /var/cache/apt/archives until cleaned."}
    assert ranks(hits, parents, QUESTION, DOCS) == (1, 2)


def test_the_snippet_in_another_file_does_not_answer() -> None:
    hits = [hit("copy/guide.html", "stored in the /var/cache/apt/archives"), hit("manual/guide.html", "unrelated")]
    assert ranks(hits, {}, QUESTION, DOCS) == (2, None)


def test_the_file_rank_counts_distinct_files() -> None:
    hits = [hit("a.html", "x"), hit("a.html", "y"), hit("b.html", "z"), hit("manual/guide.html", "w")]
    assert ranks(hits, {}, QUESTION, DOCS) == (3, None)


def test_figures_hit_at_one_and_five_mrr_and_file_ndcg() -> None:
    out = figures([(1, 1), (2, 5), (1, None), (None, None)])
    assert out["passageHit@1"] == 0.25
    assert out["passageHit@5"] == 0.5
    assert out["passageMRR@10"] == round((1 + 1 / 5) / 4, 4)
    assert out["fileHit@5"] == 0.75
    assert out["fileNDCG@10"] == round((1 + 1 / 1.5849625007211563 + 1) / 4, 4)
    assert out["questions"] == 4


def test_groups_split_by_question_language_and_cross_lingual() -> None:
    qs = [dict(QUESTION, id="a"), dict(QUESTION, id="b", lang="en", docLang="en", kind="exact")]
    out = grouped(qs, {"a": (1, 1), "b": (1, None)})
    assert out["de"]["questions"] == 1 and out["de"]["passageHit@1"] == 1.0
    assert out["cross-lingual"]["questions"] == 1 and out["same-language"]["passageHit@1"] == 0.0
    assert out["all"]["passageHit@1"] == 0.5 and out["ru"]["questions"] == 0


def test_normalise_collapses_every_run_of_whitespace() -> None:
    assert normalise("  a\n\tb   c \n") == "a b c"


# ---- the question set itself ----

def test_the_set_has_sixty_questions_over_ten_manuals_in_three_languages() -> None:
    qs = load_questions()
    assert len(qs) >= 60
    assert len({q["id"] for q in qs}) == len(qs)
    assert len({q["file"].split("/")[0] for q in qs}) >= 9
    assert len({q["file"] for q in qs}) >= 10
    assert set(Counter(q["lang"] for q in qs)) == {"en", "de", "ru"}
    assert set(Counter(q["docLang"] for q in qs)) == {"en", "de", "ru"}
    assert sum(q["lang"] != q["docLang"] for q in qs) * 3 >= len(qs)
    assert {q["kind"] for q in qs} == {"exact", "paraphrase"}


@pytest.mark.parametrize("q", load_questions(), ids=lambda q: q["id"])
def test_each_question_names_a_file_the_packages_provide_and_does_not_contain_its_snippet(q: dict) -> None:
    package, name = q["file"].split("/", 1)
    assert package in PACKAGES, q["file"]
    globs = [Path(g).name.removesuffix(".gz").replace(".text", "") for g in PACKAGES[package][2]]
    assert any(fnmatch.fnmatch(name.removesuffix(".txt"), g.removesuffix(".txt")) for g in globs), q["file"]
    assert 5 <= len(q["snippet"]) <= 160
    assert normalise(q["snippet"]).lower() not in q["question"].lower()
