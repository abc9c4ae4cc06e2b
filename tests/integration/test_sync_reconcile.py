"""Sync makes the index equal to the disk: scenarios on real folders, locking, crashes."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.errors import SyncBusy
from appliance.results import SkippedFile
from appliance.storage import writes as store_writes
from appliance.storage.locking import sync_lock

pytestmark = pytest.mark.model


def _state(app) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """source id -> chunk count, as stored in the chunks table."""
    counts: dict[str, int] = {}
    for row in app.index.reader.chunk_rows("chunk_index >= 0", ["source_id"]):
        counts[row["source_id"]] = counts.get(row["source_id"], 0) + 1
    return counts


def _adds_up(report) -> None:  # type: ignore[no-untyped-def]
    d = report.to_dict()
    assert d["added"] + d["updated"] + d["unchanged"] + d["refreshed"] + d["failedCount"] + d["skippedCount"] \
        == d["seen"]


def test_reconcile_scenarios(make_app, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha document talks about reindeer herding.\n")
    (docs / "b.txt").write_text("Beta is about glacier hiking in Iceland.\n")
    (docs / "sub").mkdir()
    (docs / "sub" / "c.md").write_text("Gamma covers sourdough baking.\n")
    app = make_app(docs)
    first = app.sync()
    _adds_up(first)
    assert first.added == 3 and first.ok

    # touch: same bytes, new mtime -> metadata refresh, no re-embedding
    os.utime(docs / "a.md", ns=(time.time_ns(), time.time_ns() + 10**9))
    touched = app.sync()
    _adds_up(touched)
    assert touched.refreshed == 1 and touched.chunks == 0

    # edit -> replaced; rename -> delete + add; delete -> removed
    (docs / "b.txt").write_text("Beta is now about volcano tours in Iceland.\n")
    (docs / "sub" / "c.md").rename(docs / "sub" / "c2.md")
    (docs / "a.md").unlink()
    changed = app.sync()
    _adds_up(changed)
    assert (changed.updated, changed.added, changed.deleted) == (1, 1, 2)
    assert set(_state(app)) == {str(docs / "b.txt"), str(docs / "sub" / "c2.md")}
    assert "volcano" in app.search("volcano tours", top_k=1).results[0].text

    # a symlink that escapes is ignored; one that stays inside is indexed under its own name
    outside = tmp_path / "outside.md"
    outside.write_text("secret outside the root\n")
    os.symlink(outside, docs / "escape.md")
    os.symlink(docs / "b.txt", docs / "link-to-b.txt")
    linked = app.sync()
    assert set(_state(app)) == {str(docs / "b.txt"), str(docs / "sub" / "c2.md"), str(docs / "link-to-b.txt")}
    _adds_up(linked)

    # .indexignore excludes more; the excluded file's chunks go away
    (docs / ".indexignore").write_text("sub/\n")
    app.sync()
    assert str(docs / "sub" / "c2.md") not in _state(app)

    # sync PATH touches only that subtree
    (docs / "other").mkdir()
    (docs / "other" / "d.md").write_text("Delta is about tidal energy.\n")
    (docs / "b.txt").unlink()
    scoped = app.sync(docs / "other")
    assert scoped.added == 1 and scoped.deleted == 0
    assert str(docs / "b.txt") in _state(app)


def test_move_between_roots(make_app, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    (one / "x.md").write_text("Moving documents between roots keeps them searchable.\n")
    (one / "stay.md").write_text("This one stays, so root one is not emptied (that would hold its files).\n")
    app = make_app(one, BASE_DIRS=f'["{one}", "{two}"]')
    app.sync()
    (one / "x.md").rename(two / "x.md")
    moved = app.sync()
    assert (moved.added, moved.deleted) == (1, 1)
    assert set(_state(app)) == {str(two / "x.md"), str(one / "stay.md")}


def test_second_sync_refuses_while_one_runs(make_app, tmp_path: Path) -> None:
    app = make_app()
    with sync_lock(app.settings.db_path), pytest.raises(SyncBusy) as err:
        app.sync()
    assert f"pid {os.getpid()}" in err.value.message
    assert app.status().sync_running is None


@pytest.mark.slow  # `minirag sync` subprocesses killed at random, then a clean build to compare
def test_killed_syncs_converge_to_a_clean_build(make_app, tmp_path: Path, models_dir: Path) -> None:
    """kill -9 a sync at random moments; one more sync must equal a clean build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    rng = random.Random(7)
    words = ["river", "harbour", "lantern", "meadow", "copper", "violin", "orbit", "basalt", "ferry", "quartz", "лес",
             "река", "мост", "город", "ветер", "Haus", "Brücke", "Wald", "Stadt", "Fluss"]
    for n in range(40):
        paras = [f"# Note {n}\n"] + [" ".join(rng.choices(words, k=60)) for _ in range(rng.randint(1, 6))]
        (docs / f"note-{n:02d}.md").write_text("\n\n".join(paras) + "\n", "utf-8")
    env = dict(os.environ, BASE_DIR=str(docs), DB_PATH=str(tmp_path / "index"), MODELS_DIR=str(models_dir))
    cmd = [sys.executable, "-m", "appliance", "sync", "--json"]
    trials = 20
    for trial in range(trials):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 8.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if trial % 4 == 3:  # edit a few files between crashes, so replacement is exercised too
            for n in rng.sample(range(40), 3):
                with (docs / f"note-{n:02d}.md").open("a") as fh:
                    fh.write(f"\nedit {trial}\n")
    final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    recovered = make_app(docs, DB_PATH=str(tmp_path / "index"))
    clean = make_app(docs, DB_PATH=str(tmp_path / "clean"))
    clean.sync()
    assert _state(recovered) == _state(clean)
    assert recovered.search("river harbour", top_k=3).results
    assert recovered.status().index.unindexed_rows < store_writes.FOLD_DUE_ROWS


def test_snapshot_sequence_is_deduplicated_and_hits_carry_dates(make_app, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    header = "# Price list\n\nThe warehouse in Tromsø stocks anchors, ropes and marine paint.\n"
    values = {"2026-03-01": "Anchor price: 120 EUR.", "2026-03-02": "Anchor price: 135 EUR.",
              "2026-03-03": "Anchor price: 120 EUR.", "2026-03-04": "Anchor price: 120 EUR."}
    for date, line in values.items():
        (docs / f"prices-{date}.md").write_text(header + "\n## Anchors\n\n" + line + "\n")
    app = make_app(docs)
    report = app.sync()
    assert report.ok and report.added == 4
    hits = app.search("warehouse Tromsø anchors ropes marine paint", top_k=10).results
    top = [h for h in hits if "Tromsø" in h.text]
    assert len(top) == 1 and top[0].snapshot_date == "2026-03-01"
    assert top[0].also_unchanged_on == ["2026-03-02", "2026-03-03", "2026-03-04"]
    prices = {h.snapshot_date: h.also_unchanged_on for h in app.search("Anchor price", top_k=20).results
              if "Anchor price" in h.text}
    assert prices == {"2026-03-01": [], "2026-03-02": [], "2026-03-03": ["2026-03-04"]}

    full = make_app(docs, DB_PATH=str(tmp_path / "plain"), NO_SNAPSHOT_DEDUPE="1")
    full.sync()
    assert full.index.registry.count_chunks() > app.index.registry.count_chunks()


def test_git_ignored_secrets_stay_out_and_unreadable_rules_are_reported(make_app, tmp_path: Path) -> None:
    """Issue #14: a repository owned by another uid (git would refuse it) keeps its .gitignore; a rules
    file that cannot be read leaves its directory out of the index and shows in the report and status."""
    docs = tmp_path / "docs"
    (docs / ".git").mkdir(parents=True)
    (docs / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (docs / ".gitignore").write_text("secret/\n")
    (docs / "secret").mkdir()
    (docs / "secret" / "creds.md").write_text("# Credentials\n\nThe admin password is hunter2.\n")
    (docs / "proj").mkdir()
    (docs / "proj" / "notes.md").write_text("# Project notes\n\nThe kiln reaches 1280 degrees.\n")
    (docs / "readme.md").write_text("# Readme\n\nHow to water the orchids.\n")
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(docs):
            for name in [*dirnames, *filenames, "."]:
                os.chown(os.path.join(dirpath, name), 12345, 12345)
    app = make_app(docs)
    report = app.sync()
    _adds_up(report)
    assert sorted(_state(app)) == [str(docs / "proj" / "notes.md"), str(docs / "readme.md")]
    listed = {f.file_path: f.state for f in app.list_files().files}
    assert str(docs / "secret" / "creds.md") not in listed
    assert app.list_files(include_ignored=True).files[-1] == SkippedFile(
        file_path=str(docs / "secret"), display_path="secret", state="ignored", reason="ignored by .gitignore")
    assert app.status().ignore_problems == []

    (docs / "proj" / ".gitignore").write_bytes(b"\xff\xfe not utf-8\n")
    report = app.sync()
    _adds_up(report)
    (skip,) = [s for s in report.skipped if s.code != "ignored"]  # secret/ is named as ignored too
    assert [s.path for s in report.skipped if s.code == "ignored"] == [str(docs / "secret")]
    assert skip.code == "ignore_rules_unreadable" and skip.path == str(docs / "proj")
    assert "proj/.gitignore" in skip.reason
    assert sorted(_state(app)) == [str(docs / "readme.md")]  # what the rules might exclude is taken out
    (problem,) = app.status().ignore_problems
    assert problem == {"root": str(docs), "skipped": str(docs / "proj"), "reason": skip.reason}


def test_pdf_with_garbled_pages_syncs_without_them_when_ocr_is_unavailable(make_app, tmp_path: Path) -> None:
    """No OCR (language data missing): the readable pages of a PDF with a garbled page are indexed
    and the listing names the page left out; a PDF of garbled pages only fails by name, like a
    scan; the sync goes on either way."""
    from tests.fixtures.pdf_writer import GARBLED_LINE, write_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "mixed.pdf", [["Reindeer herding in the northern valleys of Lapland."] * 3, [GARBLED_LINE] * 3])
    write_pdf(docs / "garbled.pdf", [[GARBLED_LINE] * 3])
    (docs / "notes.md").write_text("Glacier hiking in Iceland.\n")
    app = make_app(docs, OCR_LANGUAGES="xyz")
    report = app.sync()
    _adds_up(report)
    assert report.added == 2
    (failed,) = report.failed
    assert failed.code == "ocr_unavailable" and "garbled.pdf (1 of 1 pages have a garbled text layer" in failed.reason
    listed = {Path(f.file_path).name: f for f in app.list_files().files}
    assert listed["mixed.pdf"].state == "indexed"
    assert listed["mixed.pdf"].reason.startswith("page 2 not indexed: garbled text layer")
    assert listed["garbled.pdf"].state == "failed" and "reason" not in listed["notes.md"].wire()
    text = " ".join(app.read(str(docs / "mixed.pdf")).content.split())
    assert "herding in the northern valleys of Lapland" in text and "HUDXVJHEHU" not in text
