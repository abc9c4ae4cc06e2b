"""The `minirag` command as a user runs it: exit codes, --json, broken config, no network."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.models.manifest import default_models_dir

MINIRAG = str(Path(sys.executable).parent / "minirag")


def _run(args: list[str], env: dict[str, str], *, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), MINIRAG, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "runbook.md").write_text("# Runbook\n\nIf the pager shows ERR_QUASAR_0815, restart the ingest queue.\n",
                                     "utf-8")
    (docs / "погода.txt").write_text("Зимой в Новосибирске морозы доходят до минус сорока градусов.\n", "utf-8")
    clean = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "CHUNK_TOKEN_BUDGET")}
    return clean | {"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"),
                    "MODELS_DIR": os.environ.get("MODELS_DIR", str(default_models_dir()))}


def test_status_answers_with_broken_config_and_exits_0(env: dict[str, str]) -> None:
    out = _run(["status"], env | {"BASE_DIRS": "not json"})
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["configError"]["code"] == "config_error" and "BASE_DIRS" in data["configError"]["message"]
    failed = _run(["query", "x"], env | {"BASE_DIRS": "not json"})
    assert failed.returncode == 1 and failed.stderr.startswith("error: BASE_DIRS")


def test_errors_are_json_with_json_flag(env: dict[str, str]) -> None:
    out = _run(["query", "   ", "--json"], env)
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"]["code"] == "invalid_argument"


@pytest.mark.model
@pytest.mark.slow  # five `minirag` runs, three of them load the model
@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare -n")
def test_ingest_and_query_with_networking_off(env: dict[str, str]) -> None:
    offline = ["unshare", "-n"]
    docs = env["BASE_DIR"]
    ingest = _run(["ingest", docs, "--json"], env, prefix=offline)
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    assert json.loads(ingest.stdout)["added"] == 2
    query = _run(["query", "ERR_QUASAR_0815", "--json", "--top-k", "3"], env, prefix=offline)
    assert query.returncode == 0, query.stderr[-2000:]
    hits = json.loads(query.stdout)["results"]
    assert hits[0]["displayPath"] == "runbook.md"
    russian = _run(["query", "How cold does it get in Novosibirsk in winter?", "--json"], env, prefix=offline)
    assert json.loads(russian.stdout)["results"][0]["displayPath"] == "погода.txt"
    listing = json.loads(_run(["list", "--json"], env).stdout)
    assert {f["state"] for f in listing["files"]} == {"indexed"}
    deleted = _run(["delete", str(Path(docs) / "runbook.md"), "--json"], env)
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["chunksRemoved"] >= 1


@pytest.mark.slow  # five `minirag` runs
def test_list_prints_every_file_or_one_page_with_its_cursor(env: dict[str, str]) -> None:
    docs = Path(env["BASE_DIR"])
    for n in range(5):
        (docs / f"extra{n}.md").write_text("x\n", "utf-8")
    every = _run(["list"], env)
    assert every.returncode == 0 and len(every.stdout.splitlines()) == 7 and "more:" not in every.stderr
    first = _run(["list", "--limit", "4"], env)
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 4
    cursor = first.stderr.split("--cursor ")[1].strip()
    rest = json.loads(_run(["list", "--limit", "4", "--cursor", cursor, "--json"], env).stdout)
    assert len(rest["files"]) == 3 and rest["nextCursor"] is None and rest["total"] == 7
    seen = [line.split(maxsplit=1)[1] for line in first.stdout.splitlines()] + [f["filePath"] for f in rest["files"]]
    assert sorted(seen) == sorted(line.split(maxsplit=1)[1] for line in every.stdout.splitlines())
    bad = _run(["list", "--cursor", "garbage"], env)
    assert bad.returncode == 1 and "cursor" in bad.stderr
