"""Near-identical hits collapse into the best-ranked one, which names the others."""
from __future__ import annotations

from appliance.assemble.distinct import collapse, same_passage, shingles
from appliance.chunks import RankedChunk
from tests.fixtures.chunks import stored_chunk

PASSAGE = ("The pump must be primed before the first start: open the bleed valve, fill the housing with "
           "clean water until it runs out of the valve, close it and only then switch the motor on.")


def _hit(cid: str, text: str, source: str, body_start: int = 0, **extra: object) -> RankedChunk:
    chunk = stored_chunk(id=cid, source_id=source, path=source.rsplit("/", 1)[-1], chunk_index=0, text=text,
                         body_start=body_start, parent_id=f"{cid}:s0", **extra)
    return RankedChunk(chunk, 0.1, 1.0)


def test_the_same_passage_from_another_conversion_collapses() -> None:
    pdf = PASSAGE.replace("housing with ", "housing with\n").replace("valve,", "valve ,")
    docx = "## Commissioning\n" + PASSAGE + " Then check the pressure gauge."
    other = "Bearings are greased every 500 operating hours with the lithium grease named in the parts list."
    hits = [_hit("a", PASSAGE, "/docs/manual.md"), _hit("b", pdf, "/docs/manual.pdf", page_start=4, page_end=4),
            _hit("c", docx, "/docs/manual.docx", body_start=len("## Commissioning\n")), _hit("d", other, "/docs/x.md")]
    result = collapse(hits, limit=10)
    assert [h.id for h in result.kept] == ["a", "d"]
    assert [w.source for w in result.also_in["a"]] == ["/docs/manual.pdf", "/docs/manual.docx"]
    assert result.also_in["a"][0].page_start == 4


def test_limit_counts_distinct_passages_only() -> None:
    texts = [PASSAGE, PASSAGE.upper(), "Completely different words about sailing boats and harbour fees today.",
             "A third passage on bread baking, sourdough starters and oven temperatures for rye loaves."]
    result = collapse([_hit(str(i), t, f"/d/{i}.md") for i, t in enumerate(texts)], limit=2)
    assert [h.id for h in result.kept] == ["0", "2"]
    assert list(result.also_in) == ["0"]


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
