#!/usr/bin/env python
"""Usage: scripts/bench_ingest_data.py [SIZES_KB ...]

Measures characters per second through `Appliance.ingest_data` with the real model
(markdown from the shared corpus, repeated to each size), the rate that
INGEST_FOREGROUND_MAX_BYTES is chosen from. Each size gets its own source id in a
fresh index; the model is loaded and warmed before the first timing.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from tests.conftest import shared_path  # noqa: E402

SAMPLES = ("docling/html/groundtruth/wiki_duck.html.md", "docling/pdf/groundtruth/redp5110_sampled.md")


def main() -> int:
    sizes = [int(a) for a in sys.argv[1:]] or [16, 64, 128]
    text = "\n\n".join((shared_path() / "corpus" / s).read_text("utf-8") for s in SAMPLES)
    with tempfile.TemporaryDirectory() as tmp:
        app = Appliance(load_settings({"BASE_DIR": tmp, "DB_PATH": str(Path(tmp) / "db"),
                                       "MODELS_DIR": str(ROOT / "models" / "baked")}))
        app.ingest_data("warm-up", text[:4000])
        for kb in sizes:
            content = (text * (kb * 1024 // len(text) + 1))[:kb * 1024]
            start = time.perf_counter()
            report = app.ingest_data(f"bench-{kb}", content)
            took = time.perf_counter() - start
            print(f"{kb:5} KB {len(content):8} chars {report.chunks:5} chunks {took:7.2f} s "
                  f"{len(content) / took:8.0f} chars/s {report.chunks / took:6.1f} chunks/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
