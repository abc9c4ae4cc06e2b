"""Spreadsheets read like tables (issue 30): no `Unnamed`/`NaN` noise, the real header row repeated
with each row group, empty sheets left out. Real markitdown on workbooks made with openpyxl and on
the shared corpus's."""
from __future__ import annotations

from pathlib import Path

from appliance.ingest.chunk import chunk_document
from appliance.ingest.convert import to_markdown


def _workbook(path: Path) -> Path:
    from openpyxl import Workbook

    book = Workbook()
    ducks = book.active
    ducks.title = "Ducks"
    ducks["B1"] = "Freshwater ducks counted per year"
    ducks["B3"], ducks["C3"], ducks["E3"] = "Year", "Ducks", "Observer"
    for n, year in enumerate(range(2000, 2040)):
        ducks.cell(row=4 + n, column=2, value=year)
        ducks.cell(row=4 + n, column=3, value=100 + n)
        ducks.cell(row=4 + n, column=5, value=f"observer number {n}")
    book.create_sheet("Empty")
    book.save(path)
    return path


def test_workbook_markdown_has_no_pandas_noise(tmp_path: Path) -> None:
    md = to_markdown(_workbook(tmp_path / "ducks.xlsx"), ocr=None, max_file_size=1 << 24).markdown
    assert "Unnamed" not in md and "NaN" not in md
    assert "Empty" not in md  # a sheet without a cell is not a document part
    assert "Freshwater ducks counted per year\n\n| Year | Ducks | Observer |\n| --- | --- | --- |\n| 2000 | 100 |" in md


def test_every_row_group_carries_the_header_and_no_chunk_is_header_only(tmp_path: Path) -> None:
    md = to_markdown(_workbook(tmp_path / "ducks.xlsx"), ocr=None, max_file_size=1 << 24).markdown
    chunks = chunk_document(md, count_tokens=lambda t: len(t.split()), budget=60)
    assert len(chunks) > 3
    for c in chunks:
        assert "| Year | Ducks | Observer |" in c.text
        assert "| 20" in c.body  # holds data rows, not only the header
    assert {c.sheet for c in chunks} == {"Ducks"}


def test_corpus_workbooks_lose_their_noise(shared: Path) -> None:
    corpus = shared / "corpus"
    titled = to_markdown(corpus / "docling/xlsx/sources/xlsx_05_table_with_title.xlsx", ocr=None,
                         max_file_size=1 << 24).markdown
    assert "| Year | Freshwater Ducks |\n| --- | --- |\n| 2019 | 120 |" in titled
    cups = to_markdown(corpus / "kreuzberg/test_documents/spreadsheets/stanley_cups.xlsx", ocr=None,
                       max_file_size=1 << 24).markdown
    assert cups.count("| Team | Location | Stanley Cups |") == 2
    for rel in ("docling/xlsx/sources/xlsx_01.xlsx", "docling/xlsx/sources/xlsx_06_edge_cases_.xlsx",
                "docling/xlsx/sources/xlsx_emf.xlsx", "kreuzberg/test_documents/spreadsheets/test_01.xlsx"):
        md = to_markdown(corpus / rel, ocr=None, max_file_size=1 << 24).markdown
        assert "Unnamed" not in md and "| NaN |" not in md, rel


def test_chunks_of_different_sheet_parts_no_longer_collapse_as_one_passage(shared: Path) -> None:
    """Why topK=3 once gave 2 results: chunks made of `NaN | NaN | NaN` rows and `Unnamed` headers were
    "the same passage" to query.distinct, so search collapsed them and ran out of distinct hits."""
    from appliance.assemble.distinct import same_passage, shingles

    corpus = shared / "corpus"
    for rel in ("docling/xlsx/sources/xlsx_01.xlsx", "docling/xlsx/sources/xlsx_07_gap_tolerance_.xlsx"):
        md = to_markdown(corpus / rel, ocr=None, max_file_size=1 << 24).markdown
        bodies = [shingles(c.body) for c in chunk_document(md, count_tokens=lambda t: len(t) // 4, budget=200)]
        collapsing = [(i, j) for i in range(len(bodies)) for j in range(i + 1, len(bodies))
                      if same_passage(bodies[i], bodies[j])]
        assert collapsing == [], rel



def test_an_empty_template_of_a_sheet_with_rows_goes_and_other_header_only_sheets_stay(tmp_path: Path) -> None:
    """A header alone whose columns head a sheet with rows says nothing those rows don't, and its short chunk
    outranked them (tests/integration/test_sheet_ranking.py); a header of its own columns (an import form)
    is what its sheet says, so it stays."""
    from openpyxl import Workbook

    book = Workbook()
    book.active.title = "Template"
    book.active.append(("Part number", "Price"))
    book.create_sheet("Import form").append(("Part number", "Quantity", "Cost centre"))
    prices = book.create_sheet("Prices")
    prices.append(("Part number", "Supplier", "Price"))
    prices.append(("KX-4471", "Brandt GmbH", "12.50 EUR"))
    book.save(tmp_path / "prices.xlsx")
    md = to_markdown(tmp_path / "prices.xlsx", ocr=None, max_file_size=1 << 24).markdown
    assert "Template" not in md and "| Part number | Price |" not in md
    assert "## Import form\n| Part number | Quantity | Cost centre |\n| --- | --- | --- |\n" in md
    assert "| Part number | Supplier | Price |\n| --- | --- | --- |\n| KX-4471 | Brandt GmbH | 12.50 EUR |" in md
