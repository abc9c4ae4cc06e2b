"""Spreadsheets ranked as an agent asks (issue 30 Build 6): the row that answers comes first, carrying its
header; no `Unnamed`/`NaN` noise, no empty sheet or header-only chunk above it, and topK=3 gives 3 passages.
Real model, real LanceDB, real markitdown on a workbook made with openpyxl."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.model

HEADER = ("Part number", "Description", "Supplier", "Price", "Lead time")
ANSWER = ("KX-4471", "Hydraulic pump seal kit", "Brandt GmbH", "1,284.50 EUR", "6 weeks")
SUPPLIERS = ("Keller AG", "Vogt & Sohn", "Lindner Werkzeuge", "Hartmann KG", "Nordmetall", "Seidel Technik")
PARTS = ("Ball bearing 6204", "Drive belt XPZ", "Gear motor flange", "Proximity sensor M12", "Coolant hose 20 mm",
         "Limit switch", "Timing pulley", "Air filter cartridge", "Spindle coupling", "Relay socket")
QUESTIONS = ("Which supplier delivers part KX-4471 and at what price?",
             "Who sells us the sealing set for the hydraulic pump, and how much does it cost?")


def _workbook(path: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    book.active.title = "Notes"  # (a) an empty sheet
    book.create_sheet("Template").append(HEADER[:1] + HEADER[2:])  # (b) a header row alone
    prices = book.create_sheet("Price list")  # (c) a title row above the header, then 30 rows
    prices.append(("Spare parts price list 2026",))
    prices.append(())
    prices.append(HEADER)
    for n in range(30):
        row = ANSWER if n == 17 else (f"AB-{1200 + 7 * n}", PARTS[n % len(PARTS)] + f" size {n % 4 + 1}",
                                     SUPPLIERS[n % len(SUPPLIERS)], f"{12 + 3.5 * n:.2f} EUR", f"{n % 5 + 1} weeks")
        prices.append(row)
    book.save(path)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, real_embedder: Any) -> SimpleNamespace:
    from tests.conftest import app_factory

    root = tmp_path_factory.mktemp("sheets")
    docs = root / "docs"
    docs.mkdir()
    _workbook(docs / "parts.xlsx")
    (docs / "purchasing.md").write_text(
        "# Purchasing policy\n\nEvery order above 1,000 EUR needs a second quote from another supplier. "
        "Suppliers are reviewed once a year for price, lead time and quality.\n")
    (docs / "canteen.md").write_text("# Canteen\n\nThe canteen serves lunch from 11:30 to 14:00; on Fridays there "
                                     "is fish soup.\n")
    app: Any = app_factory(root, models_dir, real_embedder)(docs)
    report = app.sync()
    assert report.ok, report.failed
    return SimpleNamespace(docs=docs, app=app)


def _data_rows(text: str) -> list[str]:
    """The table rows of a passage below its header (the first row) and its |---| rule."""
    rows = [line for line in text.splitlines() if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line)]
    return rows[1:]


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_row_that_answers_ranks_first_with_its_header(parts: SimpleNamespace, question: str) -> None:
    hits = parts.app.search(question, top_k=3).results
    top = hits[0]
    assert top.source == str(parts.docs / "parts.xlsx") and top.sheet == "Price list", [h.text for h in hits]
    assert "| KX-4471 | Hydraulic pump seal kit | Brandt GmbH | 1,284.50 EUR | 6 weeks |" in top.text
    assert "| " + " | ".join(HEADER) + " |" in top.text  # the header repeated in the answer's row group
    assert "Spare parts price list 2026 |" not in top.text  # the title row is not taken for the header


@pytest.mark.parametrize("question", [*QUESTIONS, "part numbers, suppliers, prices and lead times"])
def test_no_noise_and_no_empty_or_header_only_passage_above_the_data(parts: SimpleNamespace, question: str) -> None:
    hits = parts.app.search(question, top_k=3).results
    assert len(hits) == 3  # the index holds more than 3 distinct passages
    assert len({(h.source, h.chunk_index) for h in hits}) == 3 and len({h.text for h in hits}) == 3
    for hit in hits:
        assert "Unnamed" not in hit.text and "NaN" not in hit.text, hit.text
        assert hit.sheet != "Notes", hit.text  # the empty sheet is no passage
    sheet_hits = [h for h in hits if h.sheet is not None]
    assert sheet_hits and _data_rows(sheet_hits[0].text), [h.text for h in hits]  # the first sheet hit has rows
