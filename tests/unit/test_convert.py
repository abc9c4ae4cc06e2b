"""Conversion on files made here: encodings, binary data, names, sizes, front matter, pictures."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from appliance.errors import ConversionFailed, FileTooLarge, InvalidArgument, UnsupportedFile
from appliance.ingest.convert import (
    IMAGE_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    accepted_extensions,
    convert_data,
    front_matter,
    strip_data_images,
    to_markdown,
)
from appliance.ingest.failures import BinaryContent, MislabelledFile
from appliance.ingest.ocr import OcrConfig
from appliance.ingest.textfile import decode_text

MB = 1 << 20


def convert(path: Path):  # type: ignore[no-untyped-def]
    return to_markdown(path, ocr=None, max_file_size=10 * MB)


def test_extension_sets() -> None:
    assert {
        ".md", ".markdown", ".txt", ".pdf", ".docx", ".pptx", ".xlsx", ".xls",
        ".html", ".htm", ".csv", ".epub", ".ipynb", ".json",
    } == SUPPORTED_EXTENSIONS
    assert {".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp"} == IMAGE_EXTENSIONS
    assert not SUPPORTED_EXTENSIONS & IMAGE_EXTENSIONS
    assert accepted_extensions(None) == SUPPORTED_EXTENSIONS
    assert accepted_extensions(OcrConfig(tesseract_cmd="/nonexistent/tesseract")) == SUPPORTED_EXTENSIONS


# -- encodings ---------------------------------------------------------------------------
RUSSIAN = "Однажды, в студёную зимнюю пору,\nЯ из лесу вышел; был сильный мороз.\n"
GERMAN = "Er enthält deutsche Wörter und Sätze über Größe.\n"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (RUSSIAN, "cp1251"), (RUSSIAN, "cp866"), (RUSSIAN, "koi8_r"), (RUSSIAN, "utf-8"),
        (GERMAN, "cp1252"), (GERMAN, "utf-8"),
        (RUSSIAN + GERMAN, "utf-16-le"), (RUSSIAN + GERMAN, "utf-16-be"), (RUSSIAN, "utf-16"),
        (RUSSIAN, "utf-8-sig"), ("名前,年齢,住所\n佐藤太郎,30,東京\n三木英子,25,大阪\n", "cp932"),
    ],
)
def test_text_encodings_are_detected(tmp_path: Path, text: str, encoding: str) -> None:
    f = tmp_path / "note.txt"
    f.write_bytes(text.encode(encoding))
    assert convert(f).markdown == text


def test_short_cp1251_is_not_read_as_cjk() -> None:
    text, enc = decode_text('{"name": "Иван", "city": "Москва"}'.encode("cp1251"))
    assert "Москва" in text and enc == "cp1251"


def test_nul_bytes_in_a_text_file_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "data.md"
    f.write_bytes(b"# Title\n" + bytes(range(256)) * 20)
    with pytest.raises(BinaryContent, match=r"data\.md"):
        convert(f)


def test_lines_are_kept_one_to_one(tmp_path: Path) -> None:
    src = "# T\r\n\r\n\r\n\r\nline five   \r\n  indented\r\n"
    f = tmp_path / "a.md"
    f.write_bytes(src.encode())
    c = convert(f)
    assert c.has_lines
    assert c.markdown.split("\n") == src.replace("\r\n", "\n").split("\n")


# -- names, sizes, mislabelled files ------------------------------------------------------
def test_lock_and_dot_files_are_refused_by_name(tmp_path: Path) -> None:
    for name in ("~$report.docx", ".hidden.md"):
        f = tmp_path / name
        f.write_bytes(b"x" * 162)
        with pytest.raises(UnsupportedFile, match=r"lock file|hidden"):
            convert(f)


def test_unknown_extension(tmp_path: Path) -> None:
    f = tmp_path / "a.exe"
    f.write_bytes(b"MZ")
    with pytest.raises(UnsupportedFile, match=r"\.exe"):
        convert(f)


def test_size_limit_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "big.pdf"
    f.write_bytes(b"not even a pdf" * 100)
    with pytest.raises(FileTooLarge, match=r"big\.pdf"):
        to_markdown(f, ocr=None, max_file_size=100)


def test_pdf_that_is_html(tmp_path: Path) -> None:
    f = tmp_path / "invoice.pdf"
    f.write_text("<!DOCTYPE html><html><body>Error 404</body></html>")
    with pytest.raises(MislabelledFile, match=r"invoice\.pdf.*HTML"):
        convert(f)


def test_docx_that_is_not_a_zip(tmp_path: Path) -> None:
    f = tmp_path / "memo.docx"
    f.write_text("plain words")
    with pytest.raises(ConversionFailed, match=r"memo\.docx.*zip"):
        convert(f)


def test_zip_bomb_docx_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "bomb.docx"
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\0" * (64 * MB))
    with pytest.raises(ConversionFailed, match=r"bomb\.docx.*zip bomb"):
        convert(f)


def test_images_need_ocr(tmp_path: Path) -> None:
    f = tmp_path / "scan.png"
    f.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(UnsupportedFile, match="OCR"):
        convert(f)


# -- front matter and pictures -----------------------------------------------------------
def test_front_matter_type_and_tags(tmp_path: Path) -> None:
    src = "---\ntitle: X\ntype: runbook\ntags: [ops, 'db', \"backup\"]\n---\n# Restore\nbody\n"
    f = tmp_path / "restore.md"
    f.write_text(src)
    c = convert(f)
    assert c.metadata["type"] == "runbook"
    assert c.metadata["tags"] == "ops,db,backup"
    assert c.markdown == src  # the text is kept


@pytest.mark.parametrize(
    ("block", "tags"),
    [("tags: a, b ,c", "a,b,c"), ("tags:\n  - one\n  - two words", "one,two words"), ("tags: []", None)],
)
def test_front_matter_tag_shapes(block: str, tags: str | None) -> None:
    assert front_matter(f"---\n{block}\n---\nbody").get("tags") == tags


def test_no_front_matter_unless_at_the_top() -> None:
    assert front_matter("text\n---\ntype: x\n---\n") == {}


def test_data_uri_pictures_become_their_alt_text() -> None:
    md = (
        "Intro ![Org chart](data:image/png;base64,iVBORw0KGgo=) after\n"
        "![](data:image/jpeg;base64...)\n"
        "![diagram](images/diagram.png) and ![logo](https://example.com/l.png)\n"
        "```\n![kept](data:image/png;base64,AAAA)\n```\n"
    )
    out = strip_data_images(md)
    assert "Intro Org chart after" in out
    assert "data:image/jpeg" not in out
    assert "![diagram](images/diagram.png)" in out and "![logo](https://example.com/l.png)" in out
    assert "![kept](data:image/png;base64,AAAA)" in out


def test_data_uri_pictures_are_kept_in_any_closed_fence_and_stripped_after_an_unclosed_one() -> None:
    md = (  # the hand tracker this replaced got all three wrong
        "> ~~~\n> ![in quote](data:image/png;base64,BBBB)\n> ~~~\n"
        "- step\n  ````md\n  ```\n  ![quoted](data:image/png;base64,AAAA)\n  ````\n"
        "```python\nstray fence, never closed\n![gone](data:image/png;base64,CCCC)\n"
    )
    out = strip_data_images(md)
    assert "![quoted](data:image/png;base64,AAAA)" in out and "![in quote](data:image/png;base64,BBBB)" in out
    assert "data:image/png;base64,CCCC" not in out and "\ngone\n" in out


# -- ingest_data ---------------------------------------------------------------------------
def test_convert_data_html_title_from_content() -> None:
    c = convert_data("<html><head><title>Price list</title></head><body><p>Item <b>42</b></p></body></html>", "html")
    assert c.title == "Price list" and "Item **42**" in c.markdown


def test_convert_data_titles_only_from_content_or_argument() -> None:
    assert convert_data("just words", "text").title is None
    assert convert_data("# Heading\nwords", "markdown").title == "Heading"
    assert convert_data("# Heading\nwords", "markdown", title="Given").title == "Given"
    assert convert_data("no heading", "markdown").title is None


def test_convert_data_markdown_keeps_lines_and_strips_pictures() -> None:
    c = convert_data("a\n![x](data:image/png;base64,QQ==)\nc", "markdown")
    assert c.markdown == "a\nx\nc" and c.has_lines


def test_convert_data_rejects_unknown_format() -> None:
    with pytest.raises(InvalidArgument):
        convert_data("x", "pdf")  # type: ignore[arg-type]


# -- PDFs whose words are placed, not separated by spaces -----------------------------------
PLACED = [
    "Please note that you should read the manual before starting the machine.",
    "Item | Price | Count",  # a borderless table: markitdown then reads the PDF with pdfplumber
    "Apples | 3 | 10",
    "Pears | 4 | 12",
]


def test_pdf_words_placed_without_spaces_stay_separate(tmp_path: Path) -> None:
    from appliance.ingest.convert_pdf import glued_share
    from tests.fixtures.pdf_writer import write_pdf

    pdf = write_pdf(tmp_path / "placed.pdf", [PLACED, ["Second page words stay apart too."]])
    c = convert(pdf)
    text = " ".join(c.markdown.split())
    assert "Please note that you should read the manual before starting the machine." in text
    assert "Second page words stay apart too." in text
    assert glued_share(c.markdown) == 0.0
    assert c.metadata["pages"] == "2" and c.metadata["text_extractor"] == "pdfium"


def test_pdf_placed_words_are_glued_by_markitdown(tmp_path: Path) -> None:
    """The failure the pdfium path exists for, reproduced: if markitdown stops gluing, re-measure."""
    from markitdown import StreamInfo
    from markitdown.converters import PdfConverter

    from appliance.ingest.convert_pdf import glued_share
    from tests.fixtures.pdf_writer import write_pdf

    pdf = write_pdf(tmp_path / "placed.pdf", [PLACED])
    with open(pdf, "rb") as fh:
        md = PdfConverter().convert(fh, StreamInfo(extension=".pdf")).markdown
    assert "Pleasenotethat" in md and glued_share(md) > 0.1


def test_glued_share_counts_runs_of_letters() -> None:
    from appliance.ingest.convert_pdf import glued_share, word_counts

    assert word_counts("Pleasenotethatyoushould read 12345 this") == (3, 1)  # digits are no word
    assert glued_share("") == 0.0
    assert glued_share("Größenverhältnisseabc ist") == 0.5


def test_pdfium_text_cleanup() -> None:
    from appliance.ingest.convert_pdf import clean_pdfium_text

    assert clean_pdfium_text("ef\ufffeficient\r\nline\x03two\r") == "efficient\nline two"
    assert clean_pdfium_text("المصـــــــر") == "المصر"


# Real page text as pdfium reads it, from corpus PDFs (and, for CJK, the corpus's Chinese text file).
SHIFTED_FONT = ("+HUDXVJHEHU\x1d *HPHLQGHYHUZDOWXQJ6FKXWWHUZDOG\x1eYHUDQWZRUWO\x11I\x81UGHQ,QKDOWGHVDPWOLFKHQ"
                "7HLOV\x1d+HUU%\x81UJHUPHLVWHU0DUWLQ+ROVFKXKR\x119\x11L\x11$\x11\n*HVDPWKHUVWHOOXQJ\x1d723&20*PE+"
                "\t&R\x11.*\x0f3ULQW6HUYLFH\x0f+DVHOZDQGHUVWU\x11\x1a\x0f\x1a\x1a\x1a\x17\x196FKXWWHUZDOG\n"
                "KHL]XQJ EHL GHU 0|UEXUJKDOOH\x11 'LHVH ,QYHVWLWLRQ EHGHXWHW HLQHQ\n")
"""non_ascii_text.pdf p1: "Herausgeber: Gemeindeverwaltung Schutterwald; verantwortl. für den Inhalt ..."
in fonts whose codes are the letters' shifted by 29; its spaces, digits and punctuation are controls."""
NORMAL_PAGES = {
    "russian": "Первый подход к пониманию прин-\nципов действия психики основан\nна идее, что субъективный опыт\n",
    "german": "Mit dem offiziellen Spatenstich startet die Gemeinde Schutterwald ein zukunftsweisendes Projekt: "
              "die Erweiterung des bestehenden Nahwärmenetzes bei der Mörburghalle.\n",
    "chinese": "这是一个中文测试 你好世界 一 二 三  测试文件\n",
    "korean": "*\t적립 혜택은 매출전표 접수 시점 기준으로 적용\n"
              "*\t삼성카드의 포인트는 빅포인트, 보너스포인트, 서비스포인트로\n",
    "arabic": "التعرف الضوئي على الحروف إشعار عدم التمییز\n"
              "(المصدر: مكتب الصحة والخدمات الإنسانیة من أجل الحقوق المدنیة)\n",
    "math": "v Wi v s s Cr = ++ (27) \ni vm s Cs r =− (28) \n⎡⎤ =+ + ⎣⎦ mv r Cr (29) \n",
    "soft hyphens": "sed diam nonumy eir\ufffemod tempor invidunt ut labore et dolore magna aliquyam erat, "
                    "sed diam volup\ufffetua.",
    # a Wingdings bullet before each line (redp5110_sampled.pdf p3): one spoilt two-letter word per line
    "bullets": "r\x01 Database performance and scalability\nr\x01 Advanced SQL knowledge and skills transfer\n"
               "r\x01 Business intelligence and analytics\nr\x01 DB2 Web Query\n",
}


@pytest.mark.parametrize("name", list(NORMAL_PAGES))
def test_normal_page_text_is_not_garbled(name: str) -> None:
    from appliance.ingest.convert_pdf import GARBLED_PAGE_SHARE, garbled_share, pdf_page_needs_ocr

    text = NORMAL_PAGES[name]
    assert garbled_share(text) < GARBLED_PAGE_SHARE / 3
    assert pdf_page_needs_ocr(text, min_chars=1) == ""
    if name != "bullets":
        assert garbled_share(text) == 0.0


def test_text_of_unmapped_fonts_is_garbled() -> None:
    from appliance.ingest.convert_pdf import GARBLED_PAGE_SHARE, garbled_share, pdf_page_needs_ocr

    assert garbled_share(SHIFTED_FONT) > 0.6  # only its few pdfium-spaced words are clean
    assert pdf_page_needs_ocr(SHIFTED_FONT, min_chars=1) == "garbled"
    # a Unicode chart's code points drawn in a private-use font (full-width-j.pdf): one word in five
    chart = "FF1D ＝ FULLWIDTH EQUALS SIGN\n≈ <wide> \ue230\ue230\ue233\ue244 =\n"
    assert 0.1 < garbled_share(chart) < GARBLED_PAGE_SHARE
    assert garbled_share("\ufffd\ufffd \ufffd") == 1.0 and garbled_share("") == 0.0 and garbled_share(" \n") == 0.0


def test_page_needs_ocr_checks_the_amount_of_text_first() -> None:
    from appliance.ingest.convert_pdf import pdf_page_needs_ocr

    assert pdf_page_needs_ocr("", min_chars=1) == "scan"
    assert pdf_page_needs_ocr("Seite 3", min_chars=100) == "scan"
    assert pdf_page_needs_ocr(SHIFTED_FONT, min_chars=100) == "garbled"
    assert pdf_page_needs_ocr("\x03\x11\x0f" * 50, min_chars=1) == "scan"  # controls alone are no text


def test_garbled_pdf_page_without_ocr_is_left_out_and_named(tmp_path: Path) -> None:
    """Without OCR a garbled page is not indexed as garbage: the other pages are, and the
    metadata (shown by the file listing) names it."""
    from dataclasses import replace

    from appliance.ingest.convert_pdf import pages_left_without_ocr
    from tests.fixtures.pdf_writer import GARBLED_LINE, write_pdf

    pdf = write_pdf(tmp_path / "amtsblatt.pdf", [["Plain words on the first page."], [GARBLED_LINE] * 3])
    no_tesseract = replace(OcrConfig(), min_chars_per_page=1, tesseract_cmd="/nonexistent/tesseract")
    for ocr in (None, no_tesseract):
        c = to_markdown(pdf, ocr=ocr, max_file_size=10 * MB)
        assert "Plain words on the first page." in c.markdown and "HUDXVJHEHU" not in c.markdown
        assert c.metadata["garbled_pages"] == "2" and "ocr_pages" not in c.metadata and c.ocr_engine == ""
        assert "<!-- Page number: 2 -->" in c.markdown
    note = pages_left_without_ocr(c.metadata) or ""
    assert note.startswith("page 2 not indexed: garbled text layer") and "tesseract" in note
    assert pages_left_without_ocr({"pages": "2"}) is None


def test_pdf_of_garbled_pages_only_fails_without_ocr(tmp_path: Path) -> None:
    """Like a scan: nothing usable to index, so the file fails by name with the install hint."""
    from appliance.errors import OcrUnavailable
    from tests.fixtures.pdf_writer import GARBLED_LINE, write_pdf

    pdf = write_pdf(tmp_path / "amtsblatt.pdf", [[GARBLED_LINE] * 3, [GARBLED_LINE] * 2])
    with pytest.raises(OcrUnavailable, match=r"amtsblatt\.pdf \(2 of 2 pages have a garbled text layer"):
        convert(pdf)


def test_converter_library_warnings_stay_off_stderr(shared: Path) -> None:
    """openpyxl warns about a workbook extension it skips; that is no news for the person watching a sync."""
    path = shared / "corpus" / "textract" / "xlsx" / "standardized_text.xlsx"
    code = ("import sys; from pathlib import Path; from appliance.ingest.convert import to_markdown; "
            "print(len(to_markdown(Path(sys.argv[1]), ocr=None, max_file_size=10**8).markdown))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and int(done.stdout) > 0, done.stderr
    assert done.stderr == ""
