"""Files of no listed type: text recognised by content, binary left out with a reason, and the
headings of reStructuredText, AsciiDoc, Org, LaTeX and man pages read for the chunker."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from appliance.errors import FileTooLarge, UnsupportedFile
from appliance.ingest.chunk import chunk_document
from appliance.ingest.convert import to_markdown
from appliance.ingest.discover import UNSUPPORTED, FoundFile, Skipped, walk
from appliance.ingest.formats import SUPPORTED_EXTENSIONS, binary_reason, unlisted_reason
from appliance.ingest.markup import syntax_of

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
RST = """Frobnicator
===========

Frobnicator turns widgets into gadgets.

Installation
------------

Run the installer.

Requirements
~~~~~~~~~~~~

A kettle and a spoon are required to build frobnicator.
"""


def _count(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize(("data", "text"), [
    (b"", True),
    (b"plain words\nand a second line\n", True),
    ("Grüße aus Köln, это текст".encode("cp1251", "replace"), True),
    ("UTF-16 text with a BOM".encode("utf-16"), True),
    ("UTF-16 text without one, long enough".encode("utf-16-le"), True),
    (PNG, False),
    (b"%PDF-1.7\n1 0 obj", False),
    (b"\x7fELF\x02\x01\x01" + b"\x00" * 64, False),
    (bytes(range(1, 32)) * 20, False),
    (b"data\x00with\x00nuls\x00in\x00odd\x01places\x02", False),
])
def test_binary_reason_tells_text_from_binary(data: bytes, text: bool) -> None:
    assert (binary_reason(data) is None) is text


def test_unlisted_files_are_judged_by_content(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("Read me.\n")
    (tmp_path / "notes.rst").write_text(RST)
    (tmp_path / "changelog.Debian.gz").write_bytes(gzip.compress(b"pkg (1.0) unstable; urgency=low\n"))
    (tmp_path / "blob").write_bytes(PNG)
    (tmp_path / "archive.tar.gz").write_bytes(gzip.compress(b"x" * 100 + b"\x00" * 400))
    (tmp_path / "report.pdf.gz").write_bytes(gzip.compress(b"%PDF-1.4"))
    (tmp_path / "logo.gif").write_bytes(b"GIF89a")
    (tmp_path / "damaged.gz").write_bytes(b"\x1f\x8b\x08\x00garbage that is no deflate stream")
    verdict = {p.name: unlisted_reason(p, SUPPORTED_EXTENSIONS) for p in tmp_path.iterdir()}
    assert verdict["README"] is None and verdict["notes.rst"] is None and verdict["changelog.Debian.gz"] is None
    assert "PNG" in (verdict["blob"] or "")
    assert "NUL" in (verdict["archive.tar.gz"] or "")
    assert "compressed .pdf" in (verdict["report.pdf.gz"] or "")
    assert ".gif" in (verdict["logo.gif"] or "")
    assert "gzip" in (verdict["damaged.gz"] or "")


def test_walk_yields_text_without_extension_and_names_binary(tmp_path: Path) -> None:
    """The scan used to pass over every file outside the extension list without a word."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "copyright").write_text("Copyright 2020 Someone\nLicense: GPL-3\n")
    (tmp_path / "pkg" / "NEWS").write_text("Version 2\n---------\n\nNew things.\n")
    (tmp_path / "pkg" / "icon.png").write_bytes(PNG)
    (tmp_path / "pkg" / "data").write_bytes(PNG)
    items = list(walk([tmp_path], SUPPORTED_EXTENSIONS))
    found = sorted(i.path.name for i in items if isinstance(i, FoundFile))
    skipped = {i.path.name: i for i in items if isinstance(i, Skipped)}
    assert found == ["NEWS", "copyright"]
    assert set(skipped) == {"icon.png", "data"}
    assert all(s.code == UNSUPPORTED and s.reason.startswith("unsupported type") for s in skipped.values())


def test_convert_keeps_text_verbatim_with_its_syntax(tmp_path: Path) -> None:
    path = tmp_path / "pkg" / "README.Debian"
    path.parent.mkdir()
    path.write_text("Notes for Debian\n================\n\nThe daemon listens on port 8123.\n")
    conv = to_markdown(path, ocr=None, max_file_size=1 << 20)
    assert conv.has_lines and conv.markdown == path.read_text()
    assert conv.metadata["syntax"] == "text"
    assert conv.title == "Notes for Debian"
    plain = tmp_path / "pkg" / "copyright"
    plain.write_text("Files: *\nCopyright: 2020 Someone\n")
    assert to_markdown(plain, ocr=None, max_file_size=1 << 20).title == "pkg/copyright"


def test_gzip_text_is_decompressed_within_the_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "changelog.Debian.gz"
    text = "".join(f"pkg ({n}.0) unstable; urgency=low\n\n  * Change {n}.\n\n" for n in range(2000))
    path.write_bytes(gzip.compress(text.encode()))
    conv = to_markdown(path, ocr=None, max_file_size=1 << 20)
    assert conv.markdown == text and conv.metadata["compression"] == "gzip"
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(b"a" * (8 << 20)))  # 8 MB of text from a few KB
    assert os.path.getsize(bomb) < 64 * 1024
    with pytest.raises(FileTooLarge, match="decompresses to more than MAX_FILE_SIZE"):
        to_markdown(bomb, ocr=None, max_file_size=1 << 20)


def test_binary_without_extension_is_refused_by_the_converter(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(PNG)
    with pytest.raises(UnsupportedFile, match="PNG"):
        to_markdown(path, ocr=None, max_file_size=1 << 20)


@pytest.mark.parametrize(("name", "text", "syntax"), [
    ("notes.rst", RST, "rst"),
    ("README", RST, "text"),
    ("guide.adoc", "= Guide\n\n== Setup\n\nText.\n", "asciidoc"),
    ("GUIDE", "= Guide\n\n== Setup\n\nText.\n", "asciidoc"),
    ("todo.org", "* Tasks\n** Today\nText.\n", "org"),
    ("paper.tex", "\\section{Intro}\nText.\n", "latex"),
    ("tool.1", ".TH TOOL 1\n.SH NAME\ntool\n", "roff"),
    ("tool", ".TH TOOL 1\n.SH NAME\ntool\n", "roff"),
    ("README", "# Tool\n\nUse it.\n\n## Install\n\n```\nmake\n```\n", "markdown"),
    ("setup", "#!/bin/sh\n# Install\n# Configure\necho hi\n", "text"),
])
def test_syntax_of(name: str, text: str, syntax: str) -> None:
    assert syntax_of(name, text) == syntax


KETTLE = "A kettle and a spoon are required to build frobnicator.\n"
CRUMB = "Frobnicator > Installation > Requirements"


@pytest.mark.parametrize(("syntax", "text", "crumb"), [
    ("rst", RST, CRUMB),
    ("asciidoc", "= Frobnicator\n\nIntro.\n\n== Installation\n\nRun it.\n\n=== Requirements\n\n" + KETTLE, CRUMB),
    ("org", "* Frobnicator\nIntro.\n** Installation\nRun it.\n*** Requirements\n" + KETTLE, CRUMB),
    ("latex", "\\section{Installation}\nRun it.\n\\subsection{Requirements}\n" + KETTLE,
     "Installation > Requirements"),
    ("roff", ".TH FROB 1\n.SH INSTALLATION\nRun it.\n.SS Requirements\n" + KETTLE, "INSTALLATION > Requirements"),
])
def test_headings_of_other_markups_feed_the_chunker(syntax: str, text: str, crumb: str) -> None:
    chunks = chunk_document(text, count_tokens=_count, budget=24, syntax=syntax)
    holder = next(c for c in chunks if "kettle" in c.body)
    assert holder.heading == crumb
    assert holder.text.startswith(crumb)
    assert "".join(c.body for c in chunks).split() == text.split()  # verbatim, every word once


def test_rst_adornment_after_a_paragraph_is_no_heading() -> None:
    text = ("Real title\n==========\n\nBody.\n\nA paragraph of two\nlines of text\n-------------\n\n"
            "Second\n======\n\nMore.\n")
    chunks = chunk_document(text, count_tokens=_count, budget=64, syntax="rst")
    assert {c.heading for c in chunks} == {"Real title", "Second"}


def test_a_named_root_inside_an_ignored_folder_is_scanned(tmp_path: Path) -> None:
    """~/project/.gitignore has build/ and the root is ~/project/build/docs: the scan used to find nothing."""
    project = tmp_path / "project"
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".gitignore").write_text("build/\n*.log\n")
    docs = project / "build" / "docs"
    (docs / "inner").mkdir(parents=True)
    (docs / "guide.md").write_text("# Guide\n")
    (docs / "trace.log").write_text("kept: the enclosing rules are set aside whole\n")
    (docs / ".gitignore").write_text("inner/\n")  # rules inside the root apply as always
    (docs / "inner" / "draft.md").write_text("# Draft\n")
    items = list(walk([docs], SUPPORTED_EXTENSIONS, report_skips=True))
    found = sorted(i.path.name for i in items if isinstance(i, FoundFile))
    assert found == ["guide.md", "trace.log"]
    notes = {i.code: i for i in items if isinstance(i, Skipped)}
    assert notes["ignored"].path == docs / "inner"
    assert notes["rules_set_aside"].path == docs and ".gitignore" in notes["rules_set_aside"].reason
    (project / "src").mkdir()
    (project / "src" / "a.md").write_text("# A\n")
    (project / "build" / "out.md").write_text("# Out\n")
    names = [i.path.name for i in walk([project], SUPPORTED_EXTENSIONS) if isinstance(i, FoundFile)]
    assert names == ["a.md"]  # with the repository as the root, its rules hold as before
