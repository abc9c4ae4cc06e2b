"""read_file pages: bounded, cut at line ends, continued by nextOffset, bad positions refused."""
from __future__ import annotations

import pytest

from appliance.assemble.paging import text_page
from appliance.errors import InvalidArgument


def test_pages_cover_the_text_once_and_end_at_line_ends() -> None:
    text = "".join(f"line {i} " + "x" * (i % 37) + "\n" for i in range(2000))
    pages, offset = [], 0
    while True:
        page, nxt = text_page(text, offset, 5000)
        assert len(page) <= 5000
        pages.append(page)
        if nxt is None:
            break
        assert page.endswith("\n") and nxt == offset + len(page)
        offset = nxt
    assert "".join(pages) == text and len(pages) > 5


def test_a_line_longer_than_a_page_is_cut_at_the_limit() -> None:
    page, nxt = text_page("a" * 12_000, 0, 5000)
    assert (len(page), nxt) == (5000, 5000)


@pytest.mark.parametrize("offset,max_chars", [(-1, 100), (11, 100), (0, 0), (0, 10**9), (True, 100), (0, "5")])
def test_bad_positions_and_sizes_are_refused(offset, max_chars) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument):
        text_page("0123456789", offset, max_chars)
