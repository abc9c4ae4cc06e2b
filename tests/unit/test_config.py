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
    assert settings.ingest_foreground_max_bytes == 0 and settings.describe()["ingestForegroundMaxBytes"] == 0
