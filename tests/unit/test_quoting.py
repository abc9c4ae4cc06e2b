"""appliance.assemble.quoting: names as one visible line, and as a Markdown code span; the page's copy of the rule."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.assemble.quoting import label, md_code

PAGE_JS = Path(__file__).resolve().parents[2] / "appliance" / "static" / "page.js"
CASES = ["n\n\n4. ceo.md:9 — CEO memo\n```\nFORGED\n```\n.md", "tab\there", "esc\x1b[2K\rforged",
         "rlo\u202efdp.md", "emoji 🙂 and ünïcode",
         "nel\x85 ls\u2028 ps\u2029 del\x7f nul\x00", "zwj a\u200db", "back\\slash", "lone\udcff"]


def test_a_label_is_one_line_that_shows_what_is_there() -> None:
    assert label(CASES[0]) == "n\\n\\n4. ceo.md:9 — CEO memo\\n```\\nFORGED\\n```\\n.md"
    assert label("esc\x1b[2K\rforged") == "esc\\x1b[2K\\rforged"
    assert label("rlo\u202efdp.md") == "rlo\\u202efdp.md" and label("lone\udcff") == "lone\\udcff"
    for ordinary in ("notes/vacation.md", "tab\there", "emoji 🙂 and ünïcode", "zwj a\u200db", "back\\slash"):
        assert label(ordinary) == ordinary
    for text in CASES:  # idempotent: nothing it would escape is left
        once = label(text)
        assert label(once) == once and len(once.splitlines()) == 1


def test_a_code_span_outlasts_every_backtick_inside() -> None:
    assert md_code("a.md:3") == "`a.md:3`"
    assert md_code("run ``x`` now") == "```run ``x`` now```"
    assert md_code("`x`") == "`` `x` ``" and md_code(" padded ") == "`  padded  `"
    assert md_code("a\nb") == "`a\\nb`"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_the_pages_label_is_the_same_rule() -> None:
    source = PAGE_JS.read_text("utf-8")
    function = source[source.index("  var HIDDEN"):source.index("  function clear")]
    script = f"{function}\nconsole.log(JSON.stringify({json.dumps(CASES[:-1])}.map(label)));"
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [label(text) for text in CASES[:-1]]


def test_the_progress_bar_shows_a_name_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """`minirag sync` on a terminal: a file named like rich markup ("[/x]") neither crashes the bar nor styles it."""
    import io
    import sys

    from appliance.adapters import cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with cli._progress(True) as update:
        assert update is not None
        update("indexing", 1, 2, "notes [/x] [bold]draft\n.md")
    assert "[/x] [bold]draft\\n.md" in terminal.getvalue()


def test_the_progress_line_shows_the_current_file_on_one_line() -> None:
    from appliance.results import SyncRunning
    from appliance.sync.state import progress_line

    line = progress_line(SyncRunning.model_validate({
        "phase": "indexing", "startedBy": "cli", "filesDone": 1, "filesTotal": 2,
        "currentPath": "/docs/a\n\n4. ceo.md:9 — CEO memo\x1b[2J.md"}))
    assert "\n" not in line and "\x1b" not in line and "at /docs/a\\n\\n4. ceo.md:9" in line
