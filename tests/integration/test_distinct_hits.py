"""The same passage in several files comes back once, naming the other files (real model)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.model

PASSAGE = ("To descale the espresso machine, dissolve two tablespoons of citric acid in a litre of warm water, "
           "pour it into the tank and run it through the steam wand and the group head until the tank is empty; "
           "then rinse with two full tanks of fresh water before brewing again.")


def test_copies_collapse_and_top_k_counts_distinct_passages(make_app, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "manual.md").write_text(f"# Espresso manual\n\n## Descaling\n\n{PASSAGE}\n")
    (docs / "export.txt").write_text(PASSAGE.replace("; then", ".\nThen") + "\n")
    (docs / "wiki.html").write_text(f"<html><head><title>Kitchen wiki</title></head><body><h2>Machine care</h2>"
                                    f"<p>{PASSAGE}</p></body></html>")
    (docs / "milk.md").write_text("# Milk frothing\n\nFroth cold whole milk to 60 degrees for a stable "
                                  "microfoam; purge the steam wand before and after every use.\n")
    app = make_app(docs)
    app.sync()
    hits = app.search("how do I descale the espresso machine with citric acid", top_k=2).results
    assert len(hits) == 2
    first, second = hits
    copies = {w.source for w in first.also_in or []}
    assert {first.source, *copies} == {str(docs / n) for n in ("manual.md", "export.txt", "wiki.html")}
    assert second.source == str(docs / "milk.md") and second.also_in is None
