"""Near-identical hits collapse into the best-ranked one, which names the others."""
from __future__ import annotations

from appliance.assemble.distinct import distinct, place, same_passage, shingled, shingles
from tests.fixtures.chunks import stored_chunk

PASSAGE = ("The pump must be primed before the first start: open the bleed valve, fill the housing with "
           "clean water until it runs out of the valve, close it and only then switch the motor on.")


def test_the_same_passage_from_another_conversion_collapses() -> None:
    """Passages are compared by their own text: a heading breadcrumb before the body (body_start) and a line
    break or a space moved by another conversion do not keep two copies apart."""
    pdf = PASSAGE.replace("housing with ", "housing with\n").replace("valve,", "valve ,")
    docx_body = PASSAGE + " Then check the pressure gauge."
    other = "Bearings are greased every 500 operating hours with the lithium grease named in the parts list."
    bodies = {"a": PASSAGE, "b": pdf, "c": docx_body, "d": other}
    kept, copies = distinct(["a", "b", "c", "d"], {k: shingles(v) for k, v in bodies.items()}, limit=10)
    assert kept == ["a", "d"]
    assert copies == {"a": ["b", "c"]}


def test_limit_counts_distinct_passages_only() -> None:
    texts = [PASSAGE, PASSAGE.upper(), "Completely different words about sailing boats and harbour fees today.",
             "A third passage on bread baking, sourdough starters and oven temperatures for rye loaves."]
    kept, copies = distinct([str(i) for i in range(4)], {str(i): shingles(t) for i, t in enumerate(texts)}, limit=2)
    assert kept == ["0", "2"]
    assert copies == {"0": ["1"]}


def test_passages_of_one_text_share_their_shingles_and_collapse_as_before() -> None:
    """Exact copies (one file in two folders) are shingled once for a search, over its rounds, and still collapse
    into the best-ranked; a short passage copied stays apart, as any short passage does."""
    other = "Bearings are greased every 500 operating hours with the lithium grease named in the parts list."
    by_text: dict = {}
    first = shingled({"a": PASSAGE, "b": other, "c": PASSAGE}, by_text)
    later = shingled({"d": PASSAGE, "e": "Table 3", "f": "Table 3"}, by_text)
    assert first["a"] is first["c"] is later["d"] and first["a"] == shingles(PASSAGE) and len(by_text) == 3
    kept, copies = distinct(list("abcdef"), first | later, limit=10)
    assert kept == ["a", "b", "e", "f"] and copies == {"a": ["c", "d"]}


def test_a_copy_is_placed_by_its_own_document_and_location() -> None:
    chunk = stored_chunk(id="b", source_id="/docs/manual.pdf", path="manual.pdf", chunk_index=3, text=PASSAGE,
                         page_start=4, page_end=5, parent_id="b:s0")
    where = place(chunk)
    assert (where.source, where.display_path, where.chunk_index, where.page_start, where.page_end) == \
        ("/docs/manual.pdf", "manual.pdf", 3, 4, 5)


def test_short_or_merely_related_passages_stay_apart() -> None:
    assert not same_passage(shingles("Table 3: results"), shingles("Table 3: results"))
    related = ("The pump must be primed before every start after maintenance: open the drain, refill the "
               "housing with glycol, and let the motor idle for two minutes before loading it.")
    assert not same_passage(shingles(PASSAGE), shingles(related))


def test_a_reply_over_its_budget_loses_low_ranked_parents_first_then_hits() -> None:
    from appliance.assemble.paging import json_chars
    from appliance.assemble.passages import within_budget
    from appliance.results import RankedHit, SearchResults, SourceRef

    hits = [RankedHit(source=f"/d/{i}.md", source_kind="file", display_path=f"{i}.md", chunk_index=0,
                      parent_id=f"p{i}", text="h" * 1000) for i in range(10)]
    parents = {f"p{i}": "s" * 5000 for i in range(10)}
    answer = SearchResults(query="q", results=hits, parents=parents,
                           sources=[SourceRef(source=h.source, display_path=h.display_path, source_kind="file")
                                    for h in hits])
    fits = within_budget(answer, budget=10**6)
    assert fits.trimmed is None and len(fits.parents) == 10
    cut = within_budget(answer, budget=30_000)
    kept = len(cut.parents)
    assert len(cut.results) == 10 and sorted(cut.parents) == [f"p{i}" for i in range(kept)] and 0 < kept < 10
    assert cut.trimmed is not None and cut.trimmed.parents_omitted == 10 - kept and cut.trimmed.hits_omitted == 0
    assert json_chars(cut) <= 30_000 < json_chars(cut.model_copy(update={"parents": parents}))
    tiny = within_budget(answer, budget=3_500)
    n = len(tiny.results)
    assert 1 <= n < 10 and tiny.parents == {} and tiny.trimmed is not None and tiny.trimmed.hits_omitted == 10 - n
    assert [s.source for s in tiny.sources] == [f"/d/{i}.md" for i in range(n)]
    assert json_chars(tiny) <= 3_500  # the whole reply, keys and the note included
    assert "trimmed" in tiny.wire()
    assert answer.parents == parents and len(answer.results) == 10  # the answer itself is left as it was
