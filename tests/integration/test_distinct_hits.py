"""The same passage in several files comes back once, naming the other files (real model)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.model

PASSAGE = ("To descale the espresso machine, dissolve two tablespoons of citric acid in a litre of warm water, "
           "pour it into the tank and run it through the steam wand and the group head until the tank is empty; "
           "then rinse with two full tanks of fresh water before brewing again.")


@pytest.mark.parametrize("path", ["memory", "index"])
def test_copies_collapse_and_top_k_counts_distinct_passages(make_app, tmp_path: Path, path: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """On both query paths: the replica's, where the passages come from memory, and LanceDB's, where the ranked
    lists carry them and only the kept hits' sections and their copies' rows are read."""
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
    if path == "index":
        monkeypatch.setattr(app.index.reader.tables, "memory_budget", 0)
        monkeypatch.setattr(app.index.reader, "_replica", None)
    assert app.index.reader.query_path(4) == path
    hits = app.search("how do I descale the espresso machine with citric acid", top_k=2).results
    assert len(hits) == 2
    first, second = hits
    copies = {w.source for w in first.also_in or []}
    assert {first.source, *copies} == {str(docs / n) for n in ("manual.md", "export.txt", "wiki.html")}
    assert {w.display_path for w in first.also_in or []} == {Path(c).name for c in copies}
    assert first.parent_id in app.search("descale espresso citric acid", top_k=2).parents
    assert second.source == str(docs / "milk.md") and second.also_in is None
