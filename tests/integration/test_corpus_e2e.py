"""Every row of ../shared/corpus/EXPECTED.tsv: synced with the rest, a keyword query for its string finds it first."""
from __future__ import annotations

import csv
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.service import Appliance
from tests.conftest import shared_path

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.shared, pytest.mark.timeout(1800)]


def _rows(shared: Path) -> list[dict[str, str]]:
    with (shared / "corpus" / "EXPECTED.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _plain(text: str) -> str:
    """Lower-cased text without Markdown emphasis marks, whitespace collapsed."""
    return " ".join(text.translate(str.maketrans("", "", "*_`")).split()).lower()


@pytest.fixture(scope="module")
def synced(shared: Path, tmp_path_factory, models_dir: Path, real_embedder):  # type: ignore[no-untyped-def]
    from appliance.config import load_settings

    docs = tmp_path_factory.mktemp("corpus")
    for row in _rows(shared):
        target = docs / row["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shared / "corpus" / row["path"], target)
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(docs.parent / "corpus-index"),
                              "MODELS_DIR": str(models_dir)})
    app = Appliance(settings, embedder=real_embedder)
    report = app.sync()
    texts = {s.source_id: _plain(app.read(s.source_id).content) for s in app.index.registry.source_rows()}
    return docs, app, report, texts


def test_every_expected_file_is_indexed(synced, shared: Path) -> None:  # type: ignore[no-untyped-def]
    _docs, _app, report, _texts = synced
    assert report.failed == [], report.failed
    assert report.added == len(_rows(shared))


@pytest.mark.parametrize("row", _rows(shared_path()) if (shared_path() / "corpus").is_dir() else [],
                         ids=lambda r: r["path"])
def test_expected_string_finds_its_file_first(synced, row: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    docs, app, _report, texts = synced
    # Files that contain the same string (the corpus holds one table as .xlsx and .xls,
    # another as .xlsx and .csv; "import" is in three files) rank among themselves in
    # any order; the expected file must be one of them and every file above it too.
    wanted = _plain(row["expected_substring"])
    containing = {source for source, text in texts.items() if wanted in text} | {str(docs / row["path"])}
    keyword = Appliance(replace(app.settings, hybrid_weight=1.0), embedder=app.resources.embedder)
    result = keyword.search(row["expected_substring"], top_k=100)
    # a hit whose passage is also in other files names them in alsoIn (distinct passages): they rank with it
    ranked = list(dict.fromkeys(source for h in result.results
                                for source in [h.source, *(w.source for w in h.also_in or [])]))
    assert ranked, f"no hits for {row['expected_substring']!r}"
    position = ranked.index(str(docs / row["path"])) if str(docs / row["path"]) in ranked else None
    assert position is not None and set(ranked[:position + 1]) <= containing, (ranked, containing)
    state = {f.file_path: f for f in app.list_files().files}[str(docs / row["path"])]
    assert state.state == "indexed"
    assert bool(state.ocr_engine) == (row["needs_ocr"] == "yes")
