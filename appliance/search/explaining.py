"""Why a hit came back: its rank on each side and the query terms it matched (`explain: true`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from appliance.chunks import RankedChunk
from appliance.results import Explanation, SearchResults
from appliance.search.crosslingual import KeywordQuery
from appliance.search.fusion import Candidate
from appliance.search.keywords import analyze


def explained(answer: SearchResults, kept: Sequence[RankedChunk], candidates: Mapping[str, Candidate],
              keywords: KeywordQuery) -> SearchResults:
    """`answer` with each hit's `explain` set; `kept` are its hits' chunks in the same order."""
    hits = [hit.model_copy(update={"explain": explain_hit(chunk, candidates.get(chunk.id), keywords)})
            for hit, chunk in zip(answer.results, kept, strict=True)]
    return answer.model_copy(update={"results": hits})


def explain_hit(chunk: RankedChunk, candidate: Candidate | None, keywords: KeywordQuery) -> Explanation:
    """vectorRank, keywordRank (1-based, None where that side did not find it) and the matched terms.

    A passage's terms are analysed again from its title and text, exactly as its `keywords`
    column was written, so the match needs no extra read of the index."""
    held = set(analyze(chunk.chunk.title or "")) | set(analyze(chunk.chunk.text))
    matched: dict[tuple[str, str, str], dict[str, str | None]] = {}
    for term_set in keywords.sets:
        for member in term_set.members:
            if member.term in held:
                matched.setdefault((term_set.word, member.term, member.kind), {"word": term_set.word,
                                                                              **member.describe()})
    return Explanation(vector_rank=_rank(candidate.vector_rank if candidate else None),
                       keyword_rank=_rank(candidate.keyword_rank if candidate else None),
                       matched=list(matched.values()))


def _rank(rank: int | None) -> int | None:
    return None if rank is None else rank + 1
