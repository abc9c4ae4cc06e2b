"""Random arguments at every tool over one live stdio session: always a structured answer, never a dead server."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytestmark = [pytest.mark.model, pytest.mark.slow]

PARAMS = {
    "sync_start": ["path"], "sync_status": ["jobId"], "ingest_file": ["filePath"],
    "ingest_data": ["content", "source", "format", "title"], "ingest_url": ["url"],
    "query_documents": ["query", "topK", "scope", "docClass"],
    "read_chunk_neighbors": ["filePath", "source", "chunkIndex", "before", "after"],
    "read_file": ["filePath", "source"], "list_files": ["scope"], "delete_file": ["filePath", "source"],
    "status": [], "grep": ["pattern", "regex", "caseSensitive", "scope", "maxResults"],
}

HUGE = "ж" * 200_000
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=60),
    st.sampled_from(["", " ", "/", "/etc/passwd", "../../x", "C:\\x", "\x00", "ERR_ZORBLATT_7741", "(a+)+$",
                     "https://127.0.0.1/", "markdown", "html", HUGE, "🙂" * 500]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                              max_size=3), max_leaves=6)


def arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    known = st.dictionaries(st.sampled_from(PARAMS[tool] or ["unused"]), values, max_size=len(PARAMS[tool]) + 1)
    extra = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, known, extra)


@pytest.fixture(scope="module")
def fuzz_session(live_session: Any, tmp_path_factory: pytest.TempPathFactory,
                 server_env: dict[str, str]) -> Iterator[Any]:
    """A session on its own small corpus and index, so random writes never touch the shared one."""
    root = tmp_path_factory.mktemp("fuzz-corpus")
    (root / "a.md").write_text("# A\n\nSome text about ERR_ZORBLATT_7741.\n", "utf-8")
    env = server_env | {"BASE_DIR": str(root), "DB_PATH": str(tmp_path_factory.mktemp("fuzz-index") / "db")}
    live = live_session(env)
    live.ok("ingest_file", {"filePath": str(Path(root) / "a.md")})
    yield live
    live.close()


@pytest.mark.parametrize("tool", sorted(PARAMS))
def test_random_arguments_get_structured_answers(tool: str, fuzz_session: Any) -> None:
    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(arguments(tool))
    def check(args: dict[str, Any]) -> None:
        result = fuzz_session.call(tool, args)
        data = result.structured_content
        assert isinstance(data, dict), result
        if result.is_error:
            error = data["error"]
            assert isinstance(error["code"], str) and isinstance(error["message"], str)
            assert error["code"] != "internal_error", (args, error)
        else:
            assert data.get("error") is None  # sync jobs carry a null error field when healthy

    check()
    assert fuzz_session.ok("status")["version"]  # the session survived
