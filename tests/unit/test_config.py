"""Settings resolution: precedence of roots and named errors for bad values."""
from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.errors import ConfigError


def test_base_dir_flag_beats_base_dirs_beats_base_dir_beats_cwd(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in "abc")
    env = {"BASE_DIRS": f'["{a}", "{b}"]', "BASE_DIR": str(c)}
    assert load_settings(env, base_dirs=[str(c)], cwd=tmp_path).roots == (c,)
    assert load_settings(env, cwd=tmp_path).roots == (a, b)
    assert load_settings({"BASE_DIR": str(c)}, cwd=tmp_path).roots == (c,)
    assert load_settings({}, cwd=tmp_path).roots == (tmp_path,)


def test_db_path_defaults_next_to_first_root(tmp_path: Path) -> None:
    s = load_settings({"BASE_DIR": str(tmp_path)}, cwd=tmp_path)
    assert s.db_path == tmp_path / ".minirag" / "lancedb"
    assert load_settings({"DB_PATH": "/x/y"}, cwd=tmp_path).db_path == Path("/x/y")


@pytest.mark.parametrize("env, fragment", [
    ({"BASE_DIRS": "not json"}, "BASE_DIRS must be a JSON array"),
    ({"BASE_DIRS": "[]"}, "BASE_DIRS must be a JSON array"),
    ({"BASE_DIRS": '[1, 2]'}, "BASE_DIRS must be a JSON array"),
    ({"RAG_HYBRID_WEIGHT": "1.5"}, "RAG_HYBRID_WEIGHT must be between"),
    ({"RAG_HYBRID_WEIGHT": "abc"}, "RAG_HYBRID_WEIGHT must be a number"),
    ({"RAG_GROUPING": "close"}, "RAG_GROUPING"),
    ({"CHUNK_TOKEN_BUDGET": "8"}, "CHUNK_TOKEN_BUDGET must be at least 16"),
    ({"RAG_MAX_FILES": "0"}, "RAG_MAX_FILES"),
    ({"ALLOW_PRIVATE_URLS": "maybe"}, "ALLOW_PRIVATE_URLS"),
    ({"MAX_FILE_SIZE": "-1"}, "MAX_FILE_SIZE"),
    ({"INGEST_FOREGROUND_MAX_BYTES": "-1"}, "INGEST_FOREGROUND_MAX_BYTES must be 0"),
    ({"INGEST_FOREGROUND_MAX_BYTES": "16k"}, "INGEST_FOREGROUND_MAX_BYTES must be an integer"),
])
def test_invalid_values_are_named_errors(tmp_path: Path, env: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env, cwd=tmp_path)
    assert fragment in str(err.value)
    assert err.value.code == "config_error"


def test_flags_accept_the_usual_spellings(tmp_path: Path) -> None:
    assert load_settings({"ALLOW_PRIVATE_URLS": "yes"}, cwd=tmp_path).allow_private_urls is True
    assert load_settings({"ALLOW_PRIVATE_URLS": "off"}, cwd=tmp_path).allow_private_urls is False


def test_ingest_foreground_threshold_defaults_and_shows_in_describe(tmp_path: Path) -> None:
    from appliance.config import DEFAULT_INGEST_FOREGROUND_MAX_BYTES

    assert load_settings({}, cwd=tmp_path).ingest_foreground_max_bytes == DEFAULT_INGEST_FOREGROUND_MAX_BYTES
    settings = load_settings({"INGEST_FOREGROUND_MAX_BYTES": "0"}, cwd=tmp_path)
    assert settings.ingest_foreground_max_bytes == 0 and settings.describe().wire()["ingestForegroundMaxBytes"] == 0


# ------------------------------------------------------------------ one environment, read at the roots

def test_reading_os_environ_and_a_mapping_give_the_same_environment(monkeypatch, tmp_path: Path) -> None:
    from appliance.config import VARIABLES, read_environment

    given = {"BASE_DIRS": f'["{tmp_path}"]', "RAG_HYBRID_WEIGHT": " 0.25 ", "ALLOW_URL_INGEST": "yes",
             "MCP_AUTH_TOKEN": " s3cret-token-0123456789 ", "MINIRAG_CONTAINER": "1",
             "MODELS_MANIFEST": str(tmp_path / "m.toml"), "HF_ENDPOINT": "", "UNRELATED": "x"}
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    from_os = read_environment()
    assert from_os == read_environment(given)
    assert from_os.rag_hybrid_weight == 0.25 and from_os.allow_url_ingest is True
    assert from_os.mcp_auth_token == "s3cret-token-0123456789"
    assert from_os.hf_endpoint == "" and from_os.models_manifest == tmp_path / "m.toml"
    settings = from_os.settings(cwd=tmp_path)
    assert settings.container and settings.models_manifest == tmp_path / "m.toml" and settings.hybrid_weight == 0.25


def test_container_marker_is_exactly_1(tmp_path: Path) -> None:
    from appliance.config import read_environment

    assert [read_environment({"MINIRAG_CONTAINER": v}).minirag_container for v in ("1", "true", " 1", "")] == [
        True, False, False, False]


def test_a_broken_value_is_kept_as_its_error_and_the_rest_stays_usable(tmp_path: Path) -> None:
    from appliance.config import read_environment

    environment = read_environment({"RAG_GROUPING": "close", "SYNC_INTERVAL": "soon", "MCP_AUTH_TOKEN": "t" * 20,
                                    "MCP_HTTP_ADDRESS": "127.0.0.1:9", "MCP_INSTRUCTIONS_EXTRA": "Be brief."})
    assert list(environment.problems) == ["RAG_GROUPING", "SYNC_INTERVAL"]
    assert environment.mcp_auth_token == "t" * 20 and environment.mcp_http_address == "127.0.0.1:9"
    assert environment.rag_grouping is None  # the default stands in, never used for work
    with pytest.raises(ConfigError, match="RAG_GROUPING must be 'similar' or 'related', not 'close'"):
        environment.settings(cwd=tmp_path)
    with pytest.raises(ConfigError, match="RAG_GROUPING"):  # the same error every time
        environment.settings(cwd=tmp_path)


def test_base_dir_flag_makes_a_broken_base_dirs_irrelevant(tmp_path: Path) -> None:
    env = {"BASE_DIRS": "not json"}
    with pytest.raises(ConfigError) as err:
        load_settings(env, cwd=tmp_path)
    assert err.value.hint and "BASE_DIRS=" in err.value.hint
    assert load_settings(env, base_dirs=[str(tmp_path)], cwd=tmp_path).roots == (tmp_path,)
    with pytest.raises(ConfigError, match="RAG_MAX_FILES"):  # other variables still count
        load_settings(env | {"RAG_MAX_FILES": "0"}, base_dirs=[str(tmp_path)], cwd=tmp_path)


def test_the_first_bad_variable_is_the_one_reported(tmp_path: Path) -> None:
    env = {"SYNC_INTERVAL": "x", "CONVERT_WORKERS": "0", "RAG_HYBRID_WEIGHT": "9", "RAG_GROUPING": "close"}
    with pytest.raises(ConfigError, match=r"^RAG_GROUPING"):
        load_settings(env, cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"^CONVERT_WORKERS must be at least 1, not 0$"):
        load_settings({"SYNC_INTERVAL": "x", "CONVERT_WORKERS": "0"}, cwd=tmp_path)


def test_the_runtime_answers_status_and_instructions_with_a_broken_configuration(tmp_path: Path) -> None:
    from appliance.adapters.instructions import POLICY
    from appliance.adapters.runtime import Runtime
    from appliance.config import read_environment

    broken = Runtime(read_environment({"CHUNK_TOKEN_BUDGET": "8", "MCP_INSTRUCTIONS_EXTRA": "Cite pages."}))
    with pytest.raises(ConfigError, match="CHUNK_TOKEN_BUDGET must be at least 16"):
        broken.appliance()
    assert broken.instructions() == POLICY  # no operator line while the configuration is broken
    working = Runtime(read_environment({"MCP_INSTRUCTIONS_EXTRA": "Cite pages."}), {"base_dirs": [str(tmp_path)]})
    assert working.instructions().endswith("Operator note: Cite pages.")
    assert working.settings() is working.settings()


def test_scheduler_needs_a_mount_only_in_the_container(tmp_path: Path) -> None:
    from appliance.adapters.scheduler import docs_problem

    (tmp_path / "a.md").write_text("x")
    assert docs_problem(load_settings({"BASE_DIR": str(tmp_path)}), False) is None
    problem = docs_problem(load_settings({"BASE_DIR": str(tmp_path), "MINIRAG_CONTAINER": "1"}), False)
    assert problem and "no documents are mounted" in problem


# Writes to os.environ (or copies of it for a child process) that stay, and why: none reads a setting.
ENVIRON_ALLOWED = {
    ("platform/netguard.py", "apply_offline_env"): "the offline switches third-party libraries read at import "
                                          "(setdefault keeps the operator's values)",
    ("embed.py", "import_fastembed"): "HF_HUB_OFFLINE=1 for huggingface_hub, before fastembed is imported",
    ("ingest/isolate.py", "_worker_main"): "OMP thread limits inside a conversion worker (tesseract, onnxruntime)",
    ("sync/rounds.py", "bound_read_ahead"): "LanceDB's read-ahead in a sync round's process, which LanceDB "
                                            "reads when it first opens a table (setdefault keeps the operator's)",
    ("sync/rounds.py", "_fork_server_environment"): "the model's tokenizer file named, and jemalloc left out of "
                                                    "LD_PRELOAD, for the fork server of a sync's rounds while a "
                                                    "round's process starts (put back after)",
    ("sync/rounds.py", "_preload_tokenizer"): "the fork server reads that name as it imports the rounds module",
    ("ingest/ocr.py", "_env"): "the environment of the tesseract child: ours plus OMP_THREAD_LIMIT=1",
    ("adapters/entrypoint.py", "run_daemon"): "MCP_HTTP_ADDRESS for the %(ENV_MCP_HTTP_ADDRESS)s of the "
                                              "supervisord it execs",
    ("storage/reads.py", "leave_out_centroids"): "Lance's vector index statistics without their centroids, "
                                                 "set on import (setdefault keeps the operator's)",
}
# The composition roots: only they read the environment (read_environment(), load_settings()) and pass it down.
ROOTS = {
    ("adapters/cli.py", "main"): "`minirag`, `python -m appliance`",
    ("adapters/cli.py", "_root"): "the app run without main() (a test's CliRunner)",
    ("models/cli.py", "_root"): "`minirag models` run on its own (a test's CliRunner)",
    ("adapters/entrypoint.py", "main"): "the container entrypoint, `python3 -m appliance.adapters.entrypoint`",
    ("adapters/scheduler.py", "main"): "`python -m appliance.adapters.scheduler` (under `minirag scheduler` "
                                       "the CLI passes it)",
    ("adapters/scheduler.py", "child_round"): "the scheduler's round process",
    ("cluster/node.py", "node_models"): "a Ray worker on a cluster node: that node's MODELS_DIR (sync --ray)",
}
READERS = {"read_environment", "load_settings", "EnvSettingsSource"}


def _environment_uses() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """((module, outermost function) touching os.environ/getenv, (module, function) calling a reader)."""
    import ast

    import appliance

    package = Path(appliance.__file__).parent
    environ: set[tuple[str, str]] = set()
    readers: set[tuple[str, str]] = set()

    def visit(module: str, node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and where == "<module>":
                inner = child.name
            if isinstance(child, ast.Attribute) and child.attr in ("environ", "environb", "getenv", "putenv"):
                environ.add((module, inner))
            if isinstance(child, ast.Name) and child.id in ("environ", "getenv"):
                environ.add((module, inner))
            if isinstance(child, ast.ImportFrom) and child.module == "os" and any(
                    alias.name in ("environ", "getenv") for alias in child.names):
                environ.add((module, inner))
            if isinstance(child, ast.Call) and module != "config.py":  # config.py defines the readers
                func = child.func
                name = getattr(func, "id", None) or getattr(func, "attr", "")
                if name in READERS:
                    readers.add((module, inner))
            visit(module, child, inner)

    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        visit(module, ast.parse(path.read_text("utf-8")), "<module>")
    return environ, readers


def test_only_composition_roots_read_the_environment() -> None:
    environ, readers = _environment_uses()
    assert environ == set(ENVIRON_ALLOWED), (
        f"os.environ touched outside the allowed places: {sorted(environ - set(ENVIRON_ALLOWED))} "
        f"(add a setting to appliance.config.Environment and pass it down from a composition root); "
        f"allowed but gone: {sorted(set(ENVIRON_ALLOWED) - environ)}")
    assert readers == set(ROOTS), (
        f"the environment read outside a composition root: {sorted(readers - set(ROOTS))}; "
        f"roots that no longer read it: {sorted(set(ROOTS) - readers)}")
