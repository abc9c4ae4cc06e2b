"""The cross-lingual question set of `make eval` (scripts/eval_data/corpus_crosslingual.jsonl) is well formed.

A malformed line would only show up as a wrong figure in a slow, uncached eval run; these checks
take milliseconds. That every answer string occurs in its file's converted text is checked by the
eval itself (it warns about answers that no indexed chunk holds), since that needs the converter.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT, shared_path

DATA = ROOT / "scripts" / "eval_data" / "corpus_crosslingual.jsonl"
LANGS = {"en", "de", "ru"}
FIELDS = {"id", "question", "lang", "file", "docLang", "answer"}


def _questions() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def _files(q: dict) -> list[str]:
    return [q["file"], *q.get("alsoFiles", [])]


def test_every_line_has_the_fields_and_a_short_answer() -> None:
    for q in _questions():
        assert FIELDS <= set(q) <= FIELDS | {"alsoFiles"}, q
        assert all(isinstance(q[k], str) and q[k].strip() for k in FIELDS), q
        assert isinstance(q.get("alsoFiles", []), list), q
        assert 5 <= len(q["answer"]) <= 60, q["id"]
        # a question that contains its answer string would be judged by the words it was given
        assert " ".join(q["answer"].split()).lower() not in q["question"].lower(), q["id"]


def test_at_least_forty_questions_with_unique_ids() -> None:
    ids = [q["id"] for q in _questions()]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]


def test_every_question_is_in_another_language_than_its_document() -> None:
    directions = Counter()
    for q in _questions():
        assert {q["lang"], q["docLang"]} <= LANGS, q["id"]
        assert q["lang"] != q["docLang"], q["id"]
        directions[(q["docLang"], q["lang"])] += 1
    # all six directions between English, German and Russian, several questions each
    assert len(directions) == 6 and min(directions.values()) >= 5, directions


def test_file_paths_are_relative_and_unique_per_question() -> None:
    for q in _questions():
        files = _files(q)
        assert len(set(files)) == len(files), q["id"]
        assert all(not Path(f).is_absolute() and ".." not in Path(f).parts for f in files), q["id"]


def test_every_named_file_exists_in_the_shared_corpus() -> None:
    corpus = shared_path() / "corpus"
    if not corpus.is_dir():
        pytest.skip(f"shared corpus not found at {corpus} (set MINIRAG_SHARED): file names not checked")
    missing = sorted({f for q in _questions() for f in _files(q) if not (corpus / f).is_file()})
    assert not missing, missing
