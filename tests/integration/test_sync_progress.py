"""A running sync's progress, as another process sees it through status and sync_status."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READER = """
import json, sys
from appliance.config import load_settings
from appliance.service import Appliance
app = Appliance(load_settings({"BASE_DIR": sys.argv[1], "DB_PATH": sys.argv[2], "MODELS_DIR": sys.argv[3]}))
print(json.dumps({"status": app.status().wire()["syncRunning"], "activity": app.sync_status().wire()}))
"""


def read_from_another_process(docs: Path, db: Path, models_dir: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", READER, str(docs), str(db), str(models_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_another_process_sees_the_running_sync_and_then_the_last_one(make_app, tmp_path: Path,
                                                                     models_dir: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(6):
        (docs / f"note{n}.md").write_text(f"# Note {n}\n\nGearbox inspection number {n} found wear.\n")
    app = make_app(docs)
    reached, release = threading.Event(), threading.Event()

    def forward(phase: str, done: int, total: int, path: str) -> None:
        if phase == "indexing":  # the first file converted (files count as done once their chunks are written)
            reached.set()
            release.wait(120)

    worker = threading.Thread(target=lambda: app.sync(progress=forward), daemon=True)
    worker.start()
    try:
        assert reached.wait(120), "the sync never reached its first file"
        seen = read_from_another_process(docs, tmp_path / "index", models_dir)
    finally:
        release.set()
        worker.join(120)
    running = seen["status"]
    assert running is not None and running["startedBy"] == "cli" and running["phase"] == "indexing"
    assert running["filesTotal"] == 6 and running["filesDone"] <= running["filesConverted"] and \
        1 <= running["filesConverted"] <= 6
    assert seen["activity"]["running"]["pid"] == running["pid"] and seen["activity"]["lastSync"] is None
    after = read_from_another_process(docs, tmp_path / "index", models_dir)
    assert after["status"] is None and after["activity"]["running"] is None
    assert after["activity"]["lastSync"]["added"] == 6 and after["activity"]["jobs"] == []
