"""The chunker on real documents of the shared corpus, converted as the appliance converts them.

Structural facts are asserted rather than snapshot text: one section per slide, table
header rows repeated, whole code cells, the token budget, 4,000-character sections and
reconstruction.  Each case runs with a word counter and, when the baked model is there,
with the multilingual-e5 tokenizer itself.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.ingest.chunk import (
    CODE_BLOCK_BUDGETS,
    SECTION_CHAR_CAP,
    audit,
    blank_markers,
    chunk_document,
    collapse_whitespace,
    reconstruct,
    section_text,
)

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "models" / "baked" / "intfloat__multilingual-e5-small" / "tokenizer.json"
BUDGET = 110

CASES = {
    "docx": "node-textract/huge.docx",            # a spec-like document: headings, tables, lists
    "pptx": "markitdown/test.pptx",               # a slide deck with a table
    "xlsx": "unstructured/2023-half-year-analyses-by-segment.xlsx",
    "ipynb": "markitdown/test_notebook.ipynb",
    "pdf": "unstructured/pdf/multi-column.pdf",   # 56 KB of text over 9 pages, two columns
    # the corpus's only real transcript (a meeting-tool export); longer ones are generated
    # in tests/unit/test_chunk.py
    "transcript": "docling/docx/sources/word_image_anchors.docx",
}

_converted: dict[str, str] = {}


def words(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def e5_counter() -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_truncation()
    tok.no_padding()
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


@pytest.fixture(scope="module", params=["words", "e5"])
def counter(request) -> Callable[[str], int]:  # type: ignore[no-untyped-def]
    if request.param == "e5":
        if not TOKENIZER.is_file():
            pytest.skip(f"baked tokenizer not found at {TOKENIZER} (run `make models`)")
        return e5_counter()
    return words


def markdown_of(shared: Path, kind: str) -> str:
    if kind not in _converted:
        from appliance.ingest.convert import to_markdown

        path = shared / "corpus" / CASES[kind]
        assert path.is_file(), f"corpus file missing: {path}"
        _converted[kind] = to_markdown(path, ocr=None, max_file_size=0).markdown
    return _converted[kind]


def cut(shared: Path, kind: str, count: Callable[[str], int]):  # type: ignore[no-untyped-def]
    md = markdown_of(shared, kind)
    chunks = chunk_document(md, count_tokens=count, budget=BUDGET, title=Path(CASES[kind]).stem)
    assert chunks, f"{kind}: no chunks"
    assert audit(md, chunks, count_tokens=count, budget=BUDGET) == []
    # page and sheet marker lines are blanked: they become chunk fields, not text
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(blank_markers(md)[0])
    for c in chunks:
        assert count(c.text) <= CODE_BLOCK_BUDGETS * BUDGET
    by_section: dict[int, list] = {}
    for c in chunks:
        by_section.setdefault(c.section, []).append(c)
    for members in by_section.values():
        body = "".join(c.body for c in members).strip()
        if len(body) > SECTION_CHAR_CAP:  # the soft exception: one row, sentence or code block
            assert "\n\n" not in body or body.startswith("```"), body[:200]
        assert collapse_whitespace(section_text(members)).endswith(collapse_whitespace(body))
    return md, chunks, by_section


@pytest.mark.parametrize("kind", list(CASES))
def test_budget_and_reconstruction(shared: Path, counter, kind: str) -> None:  # type: ignore[no-untyped-def]
    _, chunks, _ = cut(shared, kind, counter)
    over = [c for c in chunks if counter(c.text) > BUDGET]
    for c in over:  # only whole fenced code blocks may pass the budget
        assert c.body.strip().startswith("```") and c.body.strip().endswith("```")


def test_slides_are_sections(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    md, _chunks, by_section = cut(shared, "pptx", counter)
    markers = re.findall(r"<!-- Slide number: (\d+) -->", md)
    assert len(markers) >= 3
    labels = [members[0].heading for members in by_section.values()]
    assert labels == [f"Slide {n}" for n in markers]
    for n, members in zip(markers, by_section.values(), strict=True):
        assert f"<!-- Slide number: {n} -->" in members[0].body
        assert {c.slide for c in members} == {int(n)}  # the slide each chunk cites


def test_spreadsheet_tables_repeat_their_header(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    md, chunks, _ = cut(shared, "xlsx", counter)
    sheets = re.findall(r"(?m)^## (.+)$", md)
    assert sheets and {c.heading for c in chunks} <= set(sheets) | {""}
    assert all(c.sheet == c.heading for c in chunks if c.heading)  # the sheet each chunk cites
    repeated = [c for c in chunks if "| ---" in c.text[:c.body_start]
                or re.search(r"(?m)^\|", c.text[:c.body_start])]
    assert repeated, "no table was long enough to need its header repeated"
    for c in repeated:
        header = c.text[:c.body_start].split("\n")[1]
        shown = header.removesuffix(" …")  # a header wider than half the budget is shortened
        assert header.startswith("|")
        assert any(line.startswith(shown) for line in md.split("\n")), header


def test_spec_document_has_heading_sections(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    md, chunks, _by_section = cut(shared, "docx", counter)
    headings = re.findall(r"(?m)^#{1,6} (.+)$", md)
    assert len(headings) >= 2
    assert any(" > " in c.heading for c in chunks)
    for c in chunks:
        if c.heading:
            crumb = c.text[:c.body_start].split("\n")[0]
            assert counter(crumb) <= BUDGET // 3


def test_notebook_code_cells_stay_whole(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    md, chunks, _ = cut(shared, "ipynb", counter)
    cells = re.findall(r"(?ms)^```python\n.*?^```", md)
    assert cells
    for cell in cells:
        assert sum(cell in c.body for c in chunks) == 1


def test_long_pdf(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    md, chunks, by_section = cut(shared, "pdf", counter)
    assert len(md) > 50_000  # pdfium text; markitdown padded its form tables to 117 KB
    assert len(chunks) > 100 and len(by_section) > 10
    sizes = sorted(len(section_text(v)) for v in by_section.values())
    assert sizes[len(sizes) // 2] <= SECTION_CHAR_CAP
    # every chunk cites its pages, in page order; a page break ends a half-full chunk, so a
    # chunk over two pages is the exception; no page marker in any text
    assert all(c.page_start is not None and c.page_start <= c.page_end <= c.page_start + 1 for c in chunks)
    pages = [c.page_start for c in chunks]
    assert pages == sorted(pages) and chunks[-1].page_end == md.count("<!-- Page number:")
    assert sum(c.page_start != c.page_end for c in chunks) <= len(chunks) // 10
    assert not any("<!-- Page number" in c.text for c in chunks)


def test_meeting_transcript_gets_time_windows(shared: Path, counter) -> None:  # type: ignore[no-untyped-def]
    _md, _chunks, by_section = cut(shared, "transcript", counter)
    labels = [members[0].heading for members in by_section.values()]
    assert labels == ["word_image_anchors", "[00:00–02:00] word_image_anchors"]
    turns = by_section[1]
    assert "This is test 1" in turns[0].body and "Yeah, exactly." in turns[-1].body
