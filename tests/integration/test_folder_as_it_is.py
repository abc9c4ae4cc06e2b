"""A documentation folder as people keep it (issue 30): READMEs and NEWS without an extension,
copyright files, .rst, gzip-compressed changelogs beside pictures and binaries. Real model,
real LanceDB, real markitdown."""
from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.assemble.distinct import COPIES_LISTED
from appliance.errors import NotFound

GIF = b"GIF89a" + bytes(range(256)) * 8

FILES: dict[str, str] = {
    "bash/README.Debian": (
        "Debian notes for bash\n=====================\n\n"
        "System-wide settings for interactive shells are read from /etc/bash.bashrc before\n"
        "the user's own ~/.bashrc. Login shells read /etc/profile first.\n"),
    "curl/copyright": (
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: curl\n\nFiles: *\nCopyright: 1996 Daniel Stenberg\n"
        "License: curl\n Permission to use, copy, modify, and distribute this software for any purpose\n"
        " with or without fee is hereby granted, provided the copyright notice appears in all copies.\n"),
    "licenses/Kettle-1.0": (
        "KETTLE PUBLIC LICENSE, version 1.0\n\n"
        "You may brew, pour and redistribute tea made with this kettle, provided that every cup\n"
        "served to a third party carries a label naming the original kettle maker.\n"),
    "frob/manual.rst": (
        "Frobnicator manual\n==================\n\nOverview\n--------\n\n"
        "The frobnicator turns widgets into gadgets.\n\n"
        "Calibration\n-----------\n\nTo calibrate the frobnicator, hold the blue button for seven seconds\n"
        "until the lamp blinks twice.\n"),
    "notes/meeting.md": "# Meeting notes\n\nWe talked about the garden party and the budget for chairs.\n",
}
NEWS = ("frobtool 3.2\n============\n\n* The export command writes CSV files with a header row.\n\n"
        "frobtool 3.1\n============\n\n* Faster start-up.\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, real_embedder: Any) -> SimpleNamespace:
    from tests.conftest import app_factory

    root = tmp_path_factory.mktemp("folder")
    docs = root / "docs"
    for rel, text in FILES.items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text)
    (docs / "frob" / "NEWS.gz").write_bytes(gzip.compress(NEWS.encode()))
    (docs / "frob" / "logo.gif").write_bytes(GIF)
    (docs / "frob" / "frobtool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4)
    (docs / ".gitignore").write_text("drafts/\n")
    (docs / "drafts").mkdir()
    (docs / "drafts" / "old.md").write_text("# Old draft\n\nNothing to see.\n")
    app: Any = app_factory(root, models_dir, real_embedder)(docs)
    return SimpleNamespace(docs=docs, app=app, report=app.sync())


def test_text_without_a_listed_extension_is_indexed(folder: SimpleNamespace) -> None:
    report = folder.report
    assert report.ok, report.failed
    assert report.added == len(FILES) + 1  # + NEWS.gz
    states = {Path(f.file_path).relative_to(folder.docs).as_posix(): f.state
              for f in folder.app.list_files().files}
    assert {rel for rel, state in states.items() if state == "indexed"} == {*FILES, "frob/NEWS.gz"}


def test_binary_files_are_named_as_unsupported(folder: SimpleNamespace) -> None:
    skipped = {Path(s.path).name: s for s in folder.report.skipped}
    assert set(skipped) == {"logo.gif", "frobtool", "drafts"}
    assert {skipped[name].code for name in ("logo.gif", "frobtool")} == {"unsupported"}
    assert "ELF" in skipped["frobtool"].reason


def test_every_file_left_out_is_named_with_its_reason(folder: SimpleNamespace) -> None:
    """The sync report, status, list_files and read_file all say what was not indexed and why."""
    ignored = next(s for s in folder.report.skipped if s.code == "ignored")
    assert Path(ignored.path) == folder.docs / "drafts" and ignored.reason == "ignored by .gitignore"
    last = folder.app.status().last_sync
    assert last["skippedCount"] == 3 and {s["code"] for s in last["skipped"]} == {"unsupported", "ignored"}
    listed = {f.display_path: f for f in folder.app.list_files().files if f.state == "unsupported"}
    assert set(listed) == {"frob/logo.gif", "frob/frobtool"}
    assert "not a format indexed" in listed["frob/logo.gif"].reason
    for rel, why in (("frob/frobtool", "binary content (a program (ELF))"), ("drafts/old.md", "ignored by .gitignore")):
        with pytest.raises(NotFound) as caught:
            folder.app.read(str(folder.docs / rel))
        assert why in caught.value.message and "Run `minirag sync`" not in (caught.value.hint or "")


@pytest.mark.parametrize(("question", "answer"), [
    ("Which file does bash read for system-wide settings of interactive shells?", "bash/README.Debian"),
    ("Who holds the copyright of curl?", "curl/copyright"),
    ("Must a cup of tea served to others name the kettle maker?", "licenses/Kettle-1.0"),
    ("How do I calibrate the frobnicator?", "frob/manual.rst"),
    ("Which frobtool version made export write a header row?", "frob/NEWS.gz"),
])
def test_questions_find_the_file_at_rank_one(folder: SimpleNamespace, question: str, answer: str) -> None:
    hits = folder.app.search(question, top_k=3).results
    assert Path(hits[0].source).relative_to(folder.docs).as_posix() == answer


def test_rst_sections_become_the_hit_heading(folder: SimpleNamespace) -> None:
    hit = folder.app.search("How do I calibrate the frobnicator?", top_k=1).results[0]
    assert hit.heading == "Frobnicator manual > Calibration"
    assert hit.start_line == 9  # the "Calibration" title line of the file itself


def test_a_root_an_enclosing_repository_ignores_is_indexed(make_app: Any, tmp_path: Path) -> None:
    """BASE_DIR=~/project/build/docs with build/ in ~/project/.gitignore: `seen 0` before."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".gitignore").write_text("build/\n")
    docs = project / "build" / "docs"
    docs.mkdir(parents=True)
    (docs / "kiln.md").write_text("# Kiln\n\nThe kiln reaches 1280 degrees for stoneware.\n")
    app = make_app(docs)
    report = app.sync()
    assert (report.seen, report.added, report.skipped) == (1, 1, [])
    (aside,) = report.rules_set_aside
    assert aside.path == str(docs) and f"ignored by {project / '.gitignore'} (the rule `build/`)" in aside.reason
    assert [p["skipped"] for p in app.status().ignore_problems] == [str(docs)]
    assert Path(app.search("How hot does the kiln get?", top_k=1).results[0].source).name == "kiln.md"


def test_top_k_distinct_passages_even_when_copies_fill_the_first_candidates(make_app: Any, tmp_path: Path) -> None:
    """topK=3 once gave 2 results: the hits asked for twice over were all one passage (there: sheets of
    `NaN` rows), which collapse into one hit, and nothing further down was looked at."""
    docs = tmp_path / "docs"
    docs.mkdir()
    copy = ("# Greenhouse\n\nThe orchid greenhouse is watered at six in the morning, before the sun reaches "
            "the glass, with rain water from the tank behind the shed.\n")
    for n in range(8):
        (docs / f"copy{n}.md").write_text(copy)
    (docs / "repotting.md").write_text("# Repotting\n\nOrchids in the greenhouse are repotted every two years "
                                       "in bark, after they flower.\n")
    (docs / "feeding.md").write_text("# Feeding\n\nGreenhouse orchids get fertiliser diluted to a quarter of "
                                     "its strength every second watering.\n")
    app = make_app(docs)
    app.sync()
    hits = app.search("When is the orchid greenhouse watered?", top_k=3).results
    assert len(hits) == 3
    # the best-ranked copies are listed (COPIES_LISTED), the others counted
    assert Path(hits[0].source).name.startswith("copy")
    assert (len(hits[0].also_in or []), hits[0].also_in_more) == (COPIES_LISTED, 7 - COPIES_LISTED)
    assert len({hits[0].source, *(w.source for w in hits[0].also_in or [])}) == COPIES_LISTED + 1
    assert {Path(h.source).name for h in hits[1:]} == {"repotting.md", "feeding.md"}
