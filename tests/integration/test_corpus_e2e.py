"""Every row of ../shared/corpus/EXPECTED.tsv: synced with the rest, its string finds it first."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from tests.conftest import shared_path

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]


def _rows(shared: Path) -> list[dict[str, str]]:
    with (shared / "corpus" / "EXPECTED.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.fixture(scope="module")
def synced(shared: Path, tmp_path_factory, models_dir: Path, real_embedder):  # type: ignore[no-untyped-def]
    from appliance.config import load_settings
    from appliance.service import Appliance

    docs = tmp_path_factory.mktemp("corpus")
    for row in _rows(shared):
        target = docs / row["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shared / "corpus" / row["path"], target)
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(docs.parent / "corpus-index"),
                              "MODELS_DIR": str(models_dir)})
    app = Appliance(settings, embedder=real_embedder)
    report = app.sync()
    return docs, app, report


def test_every_expected_file_is_indexed(synced, shared: Path) -> None:  # type: ignore[no-untyped-def]
    docs, app, report = synced
    assert report.failed == [], report.failed
    assert report.added == len(_rows(shared))


@pytest.mark.parametrize("row", _rows(shared_path()) if (shared_path() / "corpus").is_dir() else [],
                         ids=lambda r: r["path"])
def test_expected_string_finds_its_file_first(synced, row: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    docs, app, _report = synced
    result = app.search(row["expected_substring"], top_k=5)
    assert result.results, f"no hits for {row['expected_substring']!r}"
    assert result.results[0]["source"] == str(docs / row["path"]), [h["source"] for h in result.results]
    state = {f["filePath"]: f for f in app.list_files()["files"]}[str(docs / row["path"])]
    assert state["state"] == "indexed"
    assert bool(state["ocrEngine"]) == (row["needs_ocr"] == "yes")
