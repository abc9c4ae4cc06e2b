"""grep over the indexed text of every format, read_file by lines and pages, list_roots.

Real conversion (the worker process, markitdown, pdfium) and a real LanceDB index over
small files of each format written here; the deterministic HashEmbedder stands in for
the model (grep and read_file never embed). MCP through fastmcp's in-memory client, the
CLI through the `minirag` command.
"""
from __future__ import annotations

import json
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
from appliance.service import Appliance
from tests.conftest import ROOT
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder
from tests.fixtures.mcp_calls import error, ok
from tests.fixtures.pdf_writer import write_pdf

MINIRAG = str(Path(sys.executable).with_name("minirag"))
FILLER = "alpha beta gamma delta epsilon zeta eta theta iota kappa"


def _docx(path: Path) -> None:
    from scripts.hostile_files import DOC_HEAD, DOC_TAIL, _docx_parts, _para, _zip

    bold = ("<w:p><w:r><w:t xml:space=\"preserve\">The pump </w:t></w:r><w:r><w:rPr><w:b/></w:rPr>"
            "<w:t>PRESSURE</w:t></w:r><w:r><w:t xml:space=\"preserve\"> limit is seven bar</w:t></w:r></w:p>")
    _zip(path, _docx_parts(DOC_HEAD + _para("Plan introduction") + _para("The gasket memo GASKET_MEMO_4410 says so")
                           + bold + DOC_TAIL))


def _xlsx(path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    costs = book.active
    costs.title = "Costs"
    costs.append(["item", "cost"])
    costs.append(["bolts", 12])
    staff = book.create_sheet("Staff")
    staff.append(["name", "code"])
    staff.append(["Ann", "STAFF_CODE_7001"])
    book.save(path)


def _pptx(path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    for n, text in enumerate(["Opening words", "The SLIDE_TOKEN_5150 lives here", "Closing words"], start=1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Part {n}"
        slide.placeholders[1].text = text
    deck.save(path)


def _pdf(path: Path) -> None:
    """Three pages of ~300 words each, so each page is its own chunk; the token is on page 2."""
    pages = [[f"{FILLER} page one line {i}" for i in range(30)],
             [f"{FILLER} page two line {i}" for i in range(14)] + ["flange torque FLANGE_TORQUE_8812"]
             + [f"{FILLER} page two more {i}" for i in range(14)],
             [f"{FILLER} page three line {i}" for i in range(30)]]
    write_pdf(path, pages)


def build(base: Path) -> tuple[Path, Path]:
    docs, archive = base / "docs", base / "archive"
    for folder in (docs / "notes", docs / "reports" / "q3", archive):
        folder.mkdir(parents=True)
    (docs / "notes" / "readme.md").write_text(
        "# Readme\n\nfirst line\n\nThe valve code VALVE_CODE_3301 is here.\n", "utf-8")
    (docs / "notes" / "table.csv").write_text("name,code\nbob,CSV_CODE_1234\n", "utf-8")
    (docs / "notes" / "config.json").write_text('{\n  "name": "demo",\n  "key": "JSON_KEY_5522"\n}\n', "utf-8")
    _pdf(docs / "reports" / "q3" / "torque.pdf")
    _docx(docs / "reports" / "plan.docx")
    _xlsx(docs / "reports" / "budget.xlsx")
    _pptx(docs / "reports" / "deck.pptx")
    (archive / "old.md").write_text("# Old\n\nThe valve code VALVE_CODE_3301 was older.\n", "utf-8")
    return docs, archive


def settings_for(base: Path) -> Any:
    return load_settings({"BASE_DIRS": json.dumps([str(base / "docs"), str(base / "archive")]),
                          "DB_PATH": str(base / "db"), "MODELS_DIR": str(MODELS_DIR)})


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Appliance]:
    """(an MCP server, the base folder, its Appliance) over every format, synced once, plus one ingest_data item."""
    base = tmp_path_factory.mktemp("grep")
    build(base)
    app = Appliance(settings_for(base), embedder=HashEmbedder())
    report = app.sync()
    assert report.failed == [] and report.added == 8, report.to_dict()
    app.ingest_data("meeting-notes", "# Meeting\n\nwe talked\nDATA_TOKEN_9090 decided\n")
    return create_server(Runtime.serving(app, read_environment({}))), base, app


def only(out: dict[str, Any]) -> dict[str, Any]:
    assert out["matchCount"] == 1, out["matches"]
    return out["matches"][0]


def test_grep_finds_a_phrase_in_every_format_with_a_place_to_open(indexed: tuple[Any, Path, Appliance]) -> None:
    server, base, _app = indexed
    pdf = only(ok(server, "grep", {"pattern": "FLANGE_TORQUE_8812"}))
    assert pdf["displayPath"] == "reports/q3/torque.pdf" and pdf["filePath"] == str(base / "docs/reports/q3/torque.pdf")
    assert (pdf["pageStart"], pdf["pageEnd"], pdf["lineNumber"]) == (2, 2, None)
    docx = only(ok(server, "grep", {"pattern": "GASKET_MEMO_4410"}))  # markitdown wrote GASKET\_MEMO\_4410
    assert docx["displayPath"] == "reports/plan.docx" and docx["line"] == "The gasket memo GASKET_MEMO_4410 says so"
    bold = only(ok(server, "grep", {"pattern": "pump PRESSURE limit"}))  # the Markdown is "pump **PRESSURE** limit"
    assert bold["displayPath"] == "reports/plan.docx" and bold["chunkIndex"] == docx["chunkIndex"]
    sheet = only(ok(server, "grep", {"pattern": "staff_code_7001"}))
    assert (sheet["displayPath"], sheet["sheet"], sheet["line"]) == \
        ("reports/budget.xlsx", "Staff", "| Ann | STAFF_CODE_7001 |")
    slide = only(ok(server, "grep", {"pattern": "SLIDE_TOKEN_5150"}))
    assert (slide["displayPath"], slide["slide"]) == ("reports/deck.pptx", 2)
    text = ok(server, "grep", {"pattern": "VALVE_CODE_3301"})["matches"]
    assert [(m["displayPath"], m["lineNumber"]) for m in text] == [("old.md", 3), ("notes/readme.md", 5)]
    assert only(ok(server, "grep", {"pattern": "JSON_KEY_5522"}))["lineNumber"] == 3
    assert only(ok(server, "grep", {"pattern": "CSV_CODE_1234"}))["line"] == "| bob | CSV_CODE_1234 |"
    data = only(ok(server, "grep", {"pattern": "DATA_TOKEN_9090"}))
    assert (data["source"], data["sourceKind"], data["filePath"], data["lineNumber"]) == \
        ("meeting-notes", "data", None, 4)
    regex = ok(server, "grep", {"pattern": r"[A-Z]+_(CODE|TOKEN)_\d{4}", "regex": True, "caseSensitive": True})
    assert regex["matchCount"] == 6 and regex["stopped"] is None
    assert regex["documentsSearched"] == regex["documentsIndexed"] == 9 and regex["filesSearched"] == 8
    assert regex["unindexedFiles"] == regex["failedFiles"] == regex["staleFiles"] == 0 and regex["note"] is None


def test_grep_filters_by_glob_root_and_scope(indexed: tuple[Any, Path, Appliance]) -> None:
    server, base, _app = indexed
    code = {"pattern": "_(CODE|TOKEN|MEMO|KEY|TORQUE)_", "regex": True}
    paths = lambda out: sorted({m["displayPath"] for m in out["matches"]})  # noqa: E731
    assert paths(ok(server, "grep", code | {"fileGlob": "*.pdf"})) == ["reports/q3/torque.pdf"]
    assert paths(ok(server, "grep", code | {"fileGlob": "reports/**/*.pdf"})) == ["reports/q3/torque.pdf"]
    assert paths(ok(server, "grep", code | {"fileGlob": "notes/*"})) == ["notes/config.json", "notes/readme.md",
                                                                         "notes/table.csv"]
    out = ok(server, "grep", code | {"fileGlob": "*.md"})
    assert paths(out) == ["notes/readme.md", "old.md"] and out["documentsIndexed"] == 2
    assert paths(ok(server, "grep", code | {"root": "archive"})) == ["old.md"]
    by_path = ok(server, "grep", code | {"root": str(base / "docs")})
    assert "old.md" not in paths(by_path) and by_path["documentsIndexed"] == 7  # files only: no data item
    assert paths(ok(server, "grep", code | {"scope": str(base / "docs/reports/q3")})) == ["reports/q3/torque.pdf"]
    assert paths(ok(server, "grep", code | {"root": "docs", "fileGlob": "*.md"})) == ["notes/readme.md"]
    assert error(server, "grep", code | {"root": "nowhere"})["code"] == "invalid_argument"
    assert error(server, "grep", code | {"root": "/etc"})["code"] == "invalid_argument"
    assert error(server, "grep", code | {"fileGlob": "!*.md"})["code"] == "invalid_argument"


def test_grep_keeps_its_bounds_on_indexed_text(indexed: tuple[Any, Path, Appliance]) -> None:
    server, _base, app = indexed
    assert ok(server, "grep", {"pattern": "e", "maxResults": 1})["truncated"] is True
    assert error(server, "grep", {"pattern": "(", "regex": True})["code"] == "invalid_argument"
    assert error(server, "grep", {"pattern": "x", "maxResults": 501})["code"] == "invalid_argument"
    app.ingest_data("evil", "# Evil\n\n" + "a" * 60 + "!\n")  # (a|aa)+$ backtracks exponentially on it
    try:
        started = time.monotonic()
        out = ok(server, "grep", {"pattern": "(a|aa)+$", "regex": True})
        assert time.monotonic() - started < 15 and out["stopped"] in ("regex_timeout", "deadline")
    finally:
        app.delete("evil", True)


def test_grep_says_what_it_did_not_search(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nTOKEN_A in a\n", "utf-8")
    (docs / "b.md").write_text("# B\n\nTOKEN_B in b\n", "utf-8")
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"), "MODELS_DIR": str(MODELS_DIR)})
    app = Appliance(settings, embedder=HashEmbedder())
    empty = app.grep("TOKEN").wire()
    assert empty["documentsIndexed"] == 0 and empty["unindexedFiles"] == 2 and "not indexed yet" in empty["note"]
    app.sync()
    (docs / "new.md").write_text("TOKEN_NEW is only on disk\n", "utf-8")
    (docs / "broken.docx").write_bytes(b"not a zip at all")
    assert app.ingest([str(docs / "broken.docx")]).failed  # fails to convert: a failed row, no text
    (docs / "b.md").write_text("# B\n\nTOKEN_B changed, longer now\n", "utf-8")
    out = app.grep("TOKEN").wire()
    assert [m["displayPath"] for m in out["matches"]] == ["a.md", "b.md"]
    assert out["matches"][1]["line"] == "TOKEN_B in b"
    assert (out["documentsSearched"], out["documentsIndexed"]) == (2, 2)
    assert (out["unindexedFiles"], out["failedFiles"], out["staleFiles"]) == (1, 1, 1)
    assert "2 file(s) under the roots have no indexed text and were not searched" in out["note"]
    assert "1 file(s) changed on disk since indexing" in out["note"] and "sync" in out["note"]


def test_read_file_by_lines_and_pages(indexed: tuple[Any, Path, Appliance]) -> None:
    server, base, _app = indexed
    readme, pdf = str(base / "docs/notes/readme.md"), str(base / "docs/reports/q3/torque.pdf")
    part = ok(server, "read_file", {"filePath": readme, "startLine": 3, "endLine": 5})
    assert part["content"] == "first line\n\nThe valve code VALVE_CODE_3301 is here."
    assert (part["startLine"], part["endLine"], part["totalLines"]) == (3, 5, 5)
    whole = ok(server, "read_file", {"filePath": readme})
    assert part["revision"] == whole["revision"] and whole.get("startLine") is None
    assert ok(server, "read_file", {"filePath": readme, "startLine": 5, "endLine": 99})["endLine"] == 5
    assert ok(server, "read_file", {"source": "meeting-notes", "startLine": 4})["content"] == "DATA_TOKEN_9090 decided"
    page = ok(server, "read_file", {"filePath": pdf, "pageStart": 2, "pageEnd": 2})
    assert "FLANGE_TORQUE_8812" in page["content"] and "page one" not in page["content"]
    assert "page three" not in page["content"]
    assert (page["pageUnit"], page["pageStart"], page["pageEnd"], page["totalPages"]) == ("page", 2, 2, 3)
    first = ok(server, "read_file", {"filePath": pdf, "pageStart": 2, "maxChars": 1000})  # pages 2 to the end, paged
    assert first["nextOffset"] is not None and first["totalChars"] > 1000
    rest = ok(server, "read_file", {"filePath": pdf, "pageStart": 2, "offset": first["nextOffset"],
                                    "maxChars": 200_000, "revision": first["revision"]})
    assert first["content"] + rest["content"] == ok(server, "read_file", {"filePath": pdf, "pageStart": 2})["content"]
    slide = ok(server, "read_file", {"filePath": str(base / "docs/reports/deck.pptx"), "pageStart": 2, "pageEnd": 2})
    assert "SLIDE_TOKEN_5150" in slide["content"] and "Opening" not in slide["content"] and slide["pageUnit"] == "slide"
    for args in ({"filePath": readme, "startLine": 5, "endLine": 3},        # start after end
                 {"filePath": readme, "startLine": 0},                      # not 1-based
                 {"filePath": readme, "startLine": 6},                      # past the last line
                 {"filePath": readme, "pageStart": 1},                      # a text file has no pages
                 {"filePath": pdf, "startLine": 1},                         # a PDF has no source lines
                 {"filePath": pdf, "pageStart": 4},                         # past the last page
                 {"filePath": pdf, "pageStart": 3, "pageEnd": 2},
                 {"filePath": readme, "startLine": 1, "pageStart": 1}):     # both kinds of range
        assert error(server, "read_file", args)["code"] == "invalid_argument", args


def test_list_roots_names_each_root_with_its_counts(indexed: tuple[Any, Path, Appliance]) -> None:
    server, base, _app = indexed
    out = ok(server, "list_roots")
    assert out["roots"] == [
        {"name": "docs", "path": str(base / "docs"), "exists": True, "indexedFiles": 7, "failedFiles": 0},
        {"name": "archive", "path": str(base / "archive"), "exists": True, "indexedFiles": 1, "failedFiles": 0}]
    assert (out["dataSources"], out["urlSources"]) == (1, 0)
    tools = {t.name: t for t in _tools(server)}
    assert tools["list_roots"].annotations.read_only_hint is True
    assert {"root", "fileGlob"} <= set(tools["grep"].input_schema["properties"])
    assert {"startLine", "endLine", "pageStart", "pageEnd"} <= set(tools["read_file"].input_schema["properties"])


def test_root_names_tell_roots_with_one_name_apart() -> None:
    from appliance.ingest.discover import root_names

    assert root_names([Path("/a/docs"), Path("/b/docs"), Path("/c/notes")]) == ["a/docs", "b/docs", "notes"]
    assert root_names([Path("/")]) == ["/"]


def _tools(server: Any) -> list[Any]:
    import asyncio

    from fastmcp import Client

    async def run() -> list[Any]:
        async with Client(server) as client:
            return await client.list_tools()

    return asyncio.run(run())


@pytest.mark.slow  # six `minirag` runs
def test_cli_roots_grep_and_read_ranges(indexed: tuple[Any, Path, Appliance]) -> None:
    _server, base, _app = indexed
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIR", "BASE_DIRS", "MODEL_NAME")}
    env |= {"BASE_DIRS": json.dumps([str(base / "docs"), str(base / "archive")]), "DB_PATH": str(base / "db"),
            "MODELS_DIR": str(MODELS_DIR), "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([MINIRAG, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    roots = json.loads(run("roots", "--json").stdout)
    assert [(r["name"], r["indexedFiles"]) for r in roots["roots"]] == [("docs", 7), ("archive", 1)]
    assert "archive\t" + str(base / "archive") + "\t1 indexed, 0 failed" in run("roots").stdout
    found = run("grep", "FLANGE_TORQUE_8812")
    assert found.stdout.strip() == f"{base / 'docs/reports/q3/torque.pdf'} p.2: flange torque FLANGE_TORQUE_8812"
    assert "searched 9 of 9 indexed documents" in found.stderr
    sheet = run("grep", "--glob", "*.xlsx", "--root", "docs", "STAFF_CODE")
    assert sheet.stdout.strip().endswith("budget.xlsx sheet Staff: | Ann | STAFF_CODE_7001 |")
    lines = run("read", str(base / "docs/notes/readme.md"), "--start-line", "5", "--end-line", "5")
    assert lines.stdout.strip() == "The valve code VALVE_CODE_3301 is here."
    bad = subprocess.run([MINIRAG, "read", str(base / "docs/notes/readme.md"), "--page-start", "1", "--json"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "invalid_argument"
