"""Untrusted bytes (ingest_data content, ingest_url pages) are converted in a worker, never in the
server process, and a background ingest can be cancelled (sync_cancel, or delete_file on its source).

The server here is the in-memory MCP server of tests/fixtures/mcp_calls.py (fake embedder: plumbing only).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.adapters.mcp_server import create_server
from appliance.adapters.runtime import Runtime
from appliance.config import load_settings, read_environment
from appliance.ingest import convert, convert_markitdown, fetch
from appliance.service import Appliance
from tests.conftest import ROOT
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder
from tests.fixtures.http_fakes import PUBLIC_IP, FakeResolver, page
from tests.fixtures.mcp_calls import THRESHOLD, big_note, error, ok, serve, wait_for
from tests.fixtures.pdf_writer import write_pdf

SLOW_MARKER = "SLOWCONVERT_QQ7"
SLOW_DATA = f'''
import time
import appliance.ingest.convert as _convert
_real = _convert.convert_data
def _slow(content, *args, **kwargs):
    if "{SLOW_MARKER}" in content:
        time.sleep(3600)  # a conversion no one waits for: only a cancel ends it
    return _real(content, *args, **kwargs)
_convert.convert_data = _slow
'''


def _parsed_here(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("untrusted bytes were parsed in the server process")


def test_untrusted_content_is_converted_in_a_worker_not_in_the_server(
        tmp_path: Path, public: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for module, name in ((convert, "convert_data"), (convert, "to_markdown"), (convert, "html_to_markdown"),
                         (convert_markitdown, "html_to_markdown"), (fetch, "page_to_converted")):
        monkeypatch.setattr(module, name, _parsed_here)  # in this process only: a spawned worker imports afresh
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "resolver", FakeResolver({"public.test": [PUBLIC_IP]}))
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "treat_as_public", (PUBLIC_IP,))
    server, _docs = serve(tmp_path, ALLOW_URL_INGEST="1")
    ok(server, "ingest_data", {"source": "h", "format": "html",
                               "content": "<title>Kites</title><p>The KITEHTMLQ41 string is red.</p>"})
    ok(server, "ingest_data", {"source": "m", "content": "# Sails\n\nThe SAILMDQ42 mast is tall."})
    ok(server, "ingest_data", {"source": "t", "format": "text", "content": "The TEXTPLAINQ43 rope is long."})
    public.routes["/page"] = page(b"<title>Glaciers</title><p>The GLACIERURLQ44 moves slowly.</p>")
    write_pdf(tmp_path / "doc.pdf", [["The PDFURLQ45 turbine spins."]])
    public.routes["/doc.pdf"] = page((tmp_path / "doc.pdf").read_bytes(), "application/pdf")
    for name in ("page", "doc.pdf"):
        assert ok(server, "ingest_url", {"url": f"http://public.test:{public.port}/{name}"})["added"] == 1
    for args, marker in (({"source": "h"}, "KITEHTMLQ41"), ({"source": "m"}, "SAILMDQ42"),
                         ({"source": "t"}, "TEXTPLAINQ43"),
                         ({"source": f"http://public.test:{public.port}/page"}, "GLACIERURLQ44"),
                         ({"source": f"http://public.test:{public.port}/doc.pdf"}, "PDFURLQ45")):
        assert marker in ok(server, "read_file", args)["content"], marker


@pytest.mark.slow  # a fresh interpreter and a conversion worker: ~30 s on a busy 2-core machine
def test_the_server_process_never_imports_the_converters(tmp_path: Path) -> None:
    """In a fresh process (what others imported cannot hide it): ingest_data of HTML leaves markitdown,
    BeautifulSoup and pypdfium2 unimported here."""
    script = f'''
import sys
from pathlib import Path
from tests.fixtures.mcp_calls import serve, ok
server, _ = serve(Path({str(tmp_path)!r}))
ok(server, "ingest_data", {{"source": "h", "format": "html", "content": "<title>T</title><p>HTMLWORDQ7</p>"}})
assert "HTMLWORDQ7" in ok(server, "read_file", {{"source": "h"}})["content"]
print(sorted(m for m in ("markitdown", "bs4", "pypdfium2", "markdownify") if m in sys.modules))
'''
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.fixture
def slow_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Converting content that holds SLOW_MARKER takes an hour in the worker (a sitecustomize the
    spawned worker loads from PYTHONPATH)."""
    hook = tmp_path / "slow-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_DATA)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))


def serve_app(tmp_path: Path, **env: str) -> tuple[Any, Appliance]:
    """As serve(), and the Appliance behind the server (to see its conversion worker)."""
    (tmp_path / "docs").mkdir(exist_ok=True)
    settings = load_settings({"BASE_DIR": str(tmp_path / "docs"), "DB_PATH": str(tmp_path / "db"),
                              "MODELS_DIR": str(MODELS_DIR), "INGEST_FOREGROUND_MAX_BYTES": str(THRESHOLD), **env})
    app = Appliance(settings, embedder=HashEmbedder())
    return create_server(Runtime.serving(app, read_environment({}))), app


def _running(server: Any, job: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while job["phase"] == "queued":
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
        job = ok(server, "sync_status", {"jobId": job["jobId"]})
    return job


@pytest.mark.slow  # two conversion workers started (the second replaces the one the cancel killed)
def test_sync_cancel_stops_a_running_ingest_job_and_its_conversion(tmp_path: Path, slow_data: None) -> None:
    server, app = serve_app(tmp_path, CONVERT_TIMEOUT="3600")
    pool = app.resources.untrusted_pool()
    job = _running(server, ok(server, "ingest_data", {"source": "stuck", "content": big_note(SLOW_MARKER,
                                                                                             4 * THRESHOLD)}))
    deadline = time.monotonic() + 120
    while not pool.worker_pids():  # the worker has the content
        assert time.monotonic() < deadline
        time.sleep(0.1)
    converting = pool.worker_pids()
    asked = ok(server, "sync_cancel", {"jobId": job["jobId"]})
    assert asked["jobId"] == job["jobId"]
    done = wait_for(server, asked, timeout=60)
    assert done["phase"] == "cancelled" and done["error"]["code"] == "cancelled", done
    assert not any(_alive(pid) for pid in converting), "the worker converting the cancelled content still runs"
    assert error(server, "read_file", {"source": "stuck"})["code"] == "not_found"
    assert ok(server, "ingest_data", {"source": "after", "content": "# After\n\nThe pool still works."})["added"] == 1
    assert error(server, "sync_cancel", {"jobId": "nope"})["code"] == "not_found"
    assert ok(server, "sync_cancel", {"jobId": job["jobId"]})["phase"] == "cancelled"  # a finished job stays so


def test_delete_file_cancels_the_ingest_job_still_writing_its_source(tmp_path: Path, slow_data: None) -> None:
    server, _app = serve_app(tmp_path, CONVERT_TIMEOUT="3600")
    job = _running(server, ok(server, "ingest_data", {"source": "doomed", "content": big_note(SLOW_MARKER,
                                                                                             4 * THRESHOLD)}))
    deleted = ok(server, "delete_file", {"source": "doomed"})
    assert deleted["deleted"] is True and deleted["source"] == "doomed", deleted
    done = ok(server, "sync_status", {"jobId": job["jobId"]})
    assert done["phase"] == "cancelled", done
    assert error(server, "read_file", {"source": "doomed"})["code"] == "not_found"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
