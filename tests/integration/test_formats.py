"""Every format over the shared corpus: EXPECTED.tsv rows and markitdown's own string checks."""
from __future__ import annotations

import csv
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

import pytest

from appliance.chunks import Converted
from appliance.ingest.convert import SUPPORTED_EXTENSIONS, to_markdown
from appliance.ingest.failures import EncryptedDocument, MislabelledFile
from appliance.ingest.ocr import OcrConfig, ocr_status
from tests.conftest import shared_path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = shared_path() / "corpus"
pytestmark = pytest.mark.shared
MAX = 100 << 20


def _rows(name: str) -> list[dict[str, str]]:
    path = CORPUS / name
    if not path.is_file():
        return [{"missing": str(path)}]  # one row whose test fails, naming the directory
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def _need(row: dict[str, str]) -> None:
    if "missing" in row:
        pytest.fail(f"shared test data is missing: {row['missing']} (set MINIRAG_SHARED; CI always has it)")


def _norm(text: str) -> str:
    """Whitespace runs as one space; Markdown emphasis markers dropped (the TSV holds plain text)."""
    text = re.sub(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))", "", text)
    return re.sub(r"\s+", " ", text).strip()


@lru_cache(maxsize=64)
def converted(rel: str) -> Converted:
    return to_markdown(CORPUS / rel, ocr=OcrConfig(), max_file_size=MAX)


def _skip_without_xlrd(path: str) -> None:
    if path.endswith(".xls") and importlib.util.find_spec("xlrd") is None:
        pytest.skip("xlrd is not installed: .xls needs xlrd==2.0.2 in requirements.lock")


EXPECTED = _rows("EXPECTED.tsv")
EXPECTED_PARAMS = [  # the scanned rows (the OCR corpus, seconds to a minute each) are `make test-all`'s
    pytest.param(r, id=r.get("path", "missing"), marks=[pytest.mark.slow] if r.get("needs_ocr") == "yes" else [])
    for r in EXPECTED
]


@pytest.mark.parametrize("row", EXPECTED_PARAMS)
def test_expected_substring(row: dict[str, str]) -> None:
    _need(row)
    _skip_without_xlrd(row["path"])
    if row["needs_ocr"] == "yes":
        _state, hint = ocr_status(OcrConfig())
        assert hint is None, f"OCR rows need tesseract with eng+deu+rus: {hint}"
    c = converted(row["path"])
    assert _norm(row["expected_substring"]) in _norm(c.markdown), c.markdown[:2000]
    assert (c.ocr_engine == "tesseract") == (row["needs_ocr"] == "yes")
    assert c.title


# Rows of markitdown's own checks that this appliance deliberately answers differently.
DIVERGES = {
    # markitdown keeps a truncated `![](data:image/png;base64...)` placeholder; we keep only the alt text.
    ("test.docx", "must_include", "data:image/png;base64..."): "data:image/png;base64",
}
STRINGS = [
    r for r in _rows("markitdown/expected_strings.tsv")
    if "missing" in r or Path(r["filename"]).suffix.lower() in SUPPORTED_EXTENSIONS
]


@pytest.mark.parametrize(
    "row", STRINGS, ids=[f"{r.get('filename')}:{r.get('kind')}:{r.get('string', '')[:30]}" for r in STRINGS]
)
def test_markitdown_expected_strings(row: dict[str, str]) -> None:
    _need(row)
    _skip_without_xlrd(row["filename"])
    text = converted(f"markitdown/{row['filename']}").markdown
    key = (row["filename"], row["kind"], row["string"])
    if key in DIVERGES:
        assert DIVERGES[key] not in text  # the placeholder is gone
        return
    if row["kind"] == "must_include":
        assert row["string"] in text
    else:
        assert row["string"] not in text


def test_tsv_rows_of_unsupported_formats_are_not_silently_dropped() -> None:
    """.msg, RSS .xml and .zip rows are out of scope (not in SUPPORTED_EXTENSIONS)."""
    rows = _rows("markitdown/expected_strings.tsv")
    if rows and "missing" in rows[0]:
        _need(rows[0])
    skipped = {Path(r["filename"]).suffix for r in rows} - SUPPORTED_EXTENSIONS
    assert skipped == {".msg", ".xml", ".zip"}


def test_no_placeholder_pictures_in_office_output() -> None:
    for rel in ("markitdown/test.docx", "markitdown/test.pptx"):
        assert "](data:" not in converted(rel).markdown


def test_titles_from_metadata_and_headings() -> None:
    assert converted("markitdown/test.epub").title == "Test EPUB Document"  # EPUB metadata
    assert converted("markitdown/test_blog.html").title.startswith("Does Model and Inference Parameter Matter")
    assert converted("markitdown/test.pptx").title == (
        "AutoGen: Enabling Next-Gen LLM Applications via Multi-Agent Conversation"
    )


def test_encodings_in_the_corpus() -> None:
    assert converted("tika/russian.cp866.txt").metadata["encoding"] == "cp866"
    assert converted("markitdown/test_mskanji.csv").metadata["encoding"] == "cp932"
    assert "Москва" in converted("textract/json/cyrillic_cp1251.json").markdown
    for rel in ("unstructured/fake-text-utf-16-be.txt", "unstructured/fake-text-utf-16-le.txt",
                "unstructured/fake-text-utf-16.txt"):
        assert "This is a test document to use for unit tests." in converted(rel).markdown
    assert "Stanley Cups" in converted("unstructured/stanley-cups-utf-16.csv").markdown


def test_utf16_html() -> None:
    c = converted("tika/testHTML_charset_utf16le.html")
    assert c.markdown.strip() and "\x00" not in c.markdown


def test_text_lines_match_the_source() -> None:
    c = converted("docling/md/sources/wiki.md")
    src = (CORPUS / "docling/md/sources/wiki.md").read_text(encoding="utf-8").replace("\r\n", "\n")
    assert c.has_lines and c.markdown.count("\n") == src.count("\n")


def test_encrypted_pdf_is_named() -> None:
    with pytest.raises(EncryptedDocument, match="pdf-example-password"):
        to_markdown(CORPUS / "node-textract/pdf-example-password.original.pdf", ocr=None, max_file_size=MAX)


def test_mislabelled_pdf_in_the_corpus() -> None:
    with pytest.raises(MislabelledFile, match=r"notapdf\.pdf"):
        to_markdown(CORPUS / "node-textract/notapdf.pdf", ocr=None, max_file_size=MAX)


def test_short_text_layer_pdf_is_kept_without_ocr() -> None:
    """A PDF with a real but short text layer converts even when OCR is off."""
    c = to_markdown(CORPUS / "unstructured/pdf/fake-memo.pdf", ocr=None, max_file_size=MAX)
    assert c.markdown.strip() and c.ocr_engine == ""


def test_pdf_falls_back_to_pdfium_when_pdfminer_fails() -> None:
    c = converted("unstructured/pdf/pdf-bad-color-space.pdf")
    assert "2023 Environmental Report" in c.markdown
    assert c.metadata["text_extractor"].startswith("pdfium")


def test_docx_picture_linked_by_url_does_not_fail() -> None:
    c = converted("docling/docx/sources/docx_external_image.docx")
    assert c.title == "Test Document with External Image"
    assert "This paragraph comes after the external image." in c.markdown


def test_docx_picture_alt_text_is_kept() -> None:
    assert "A red and blue square" in converted("markitdown/rlink.docx").markdown


def test_pptx_with_unrecognised_shape_falls_back_to_python_pptx() -> None:
    c = converted("docling/pptx/sources/powerpoint_unrecognized_shape.pptx")
    assert "Text in an unrecognized shape" in c.markdown
    assert "<!-- Slide number: 2 -->" in c.markdown


UNMAPPED_FONT_PDF = "kreuzberg/test_documents/pdfs/non_ascii_text.pdf"
"""Its fonts have no Unicode map: every code is the letter's shifted by 29 ("+HUDXVJHEHU" for
"Herausgeber") and the space glyph is a control character. pdfium reads mojibake, pdfminer reads
only "(cid:N)"; its pages 1-15 are garbled and OCRed (tests/integration/test_ocr.py)."""


def test_unmapped_font_pdf_without_ocr_indexes_only_its_readable_pages() -> None:
    """Without OCR the garbled pages are left out, never indexed as mojibake, and named."""
    c = to_markdown(CORPUS / UNMAPPED_FONT_PDF, ocr=None, max_file_size=MAX)
    assert c.metadata["garbled_pages"] == ",".join(str(n) for n in range(1, 16))
    assert "HUDXVJHEHU" not in c.markdown and "Herausgeber" not in c.markdown
    assert "Repräsentatives Bürogebäude" in c.markdown  # page 17 has a real text layer


@pytest.mark.slow
def test_every_text_pdf_keeps_its_word_boundaries() -> None:
    """Glued words (runs of 18+ letters) are under 1% of the words of every corpus PDF that has a
    text layer; scanned PDFs (EXPECTED.tsv), the PDF whose text comes from OCR (UNMAPPED_FONT_PDF)
    and files that fail by name are left out.
    scripts/pdf_text_report.py prints the same figures per file, with pdfminer's for comparison."""
    from appliance.errors import ApplianceError
    from appliance.ingest.convert_pdf import glued_share

    _need(EXPECTED[0])
    scanned = {r["path"] for r in EXPECTED if r["path"].endswith(".pdf") and r["needs_ocr"] == "yes"}
    scanned.add(UNMAPPED_FONT_PDF)
    shares, failed = {}, []
    for path in sorted(CORPUS.rglob("*.pdf")):
        rel = path.relative_to(CORPUS).as_posix()
        if rel in scanned:
            continue
        try:
            shares[rel] = glued_share(to_markdown(path, ocr=None, max_file_size=MAX).markdown)
        except ApplianceError as exc:
            failed.append(f"{rel}: {type(exc).__name__}")
    print(f"{len(shares)} PDFs, max glued share {max(shares.values()):.4f}; named failures: {failed}")
    assert len(shares) >= 70
    assert {rel: round(s, 4) for rel, s in shares.items() if s >= 0.01} == {}
