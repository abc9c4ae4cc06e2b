#!/usr/bin/env python
"""Usage: scripts/bench_reuse.py [--json] [--code CHECKOUT] [--work DIR] [--only pdf|markdown|folder ...]

What a sync costs after a small change: chunks sent to the model and seconds, with
the real model, for
  (a) one paragraph edited in a 300-page PDF (and, second case, in a long Markdown file),
  (b) a folder of 500 small files renamed,
  (c) that folder copied to a second folder.
The text is real: SciFact abstracts from the shared eval folder (a PDF page holds two,
a small file one). Embedded chunks are counted at the model itself (every text given to
`embed_passages`), so the script measures any version of the code: `--code` names the
checkout whose `appliance` package runs (default this one), e.g. an export of main:
`git archive main | tar -x -C /tmp/main-src` then `--code /tmp/main-src`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = 300
FILES = 500
LINE_CHARS = 90
SCENARIOS = ["pdf", "markdown", "folder"]


def abstracts(shared: Path, count: int) -> list[tuple[str, str]]:
    """(title, text) of the first `count` SciFact abstracts with enough text, Latin-1 only (the PDF's font)."""
    out = []
    with (shared / "eval" / "retrieval" / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            title, text = doc["title"].strip(), doc["text"].strip()
            if len(text) < 400:
                continue
            out.append((title.encode("latin-1", "replace").decode("latin-1"),
                        text.encode("latin-1", "replace").decode("latin-1")))
            if len(out) == count:
                break
    return out


def edited(text: str) -> str:
    """One paragraph edited: its second sentence reworded."""
    first, _, rest = text.partition(". ")
    return f"{first}. In a revised reading of this passage, the authors restate the method and its limits. {rest}"


def write_long_pdf(path: Path, docs: list[tuple[str, str]]) -> None:
    from tests.fixtures.pdf_writer import write_pdf

    pages = []
    for n in range(0, len(docs), 2):
        lines: list[str] = []
        for title, text in docs[n:n + 2]:
            lines += [*textwrap.wrap(title, LINE_CHARS), "", *textwrap.wrap(text, LINE_CHARS), ""]
        pages.append(lines[:60])
    write_pdf(path, pages)


def write_long_markdown(path: Path, docs: list[tuple[str, str]]) -> None:
    path.write_text("# Abstracts\n\n" + "\n\n".join(f"## {t}\n\n{x}" for t, x in docs) + "\n", "utf-8")


class Measure:
    """An Appliance over one root and index, with the model's passage calls counted."""

    def __init__(self, work: Path, name: str, models_dir: Path) -> None:
        from appliance.config import DEFAULT_MODEL, load_settings
        from appliance.embed import OnnxEmbedder, load_spec
        from appliance.service import Appliance

        self.docs = work / name / "docs"
        self.docs.mkdir(parents=True)
        settings = load_settings({"BASE_DIR": str(self.docs), "DB_PATH": str(work / name / "index"),
                                  "MODELS_DIR": str(models_dir)})
        counter = self

        class Counting(OnnxEmbedder):
            def embed_passages(self, texts: Any) -> Any:
                counter.embedded += len(texts)
                return super().embed_passages(texts)

        self.embedded = 0
        embedder = Counting(load_spec(DEFAULT_MODEL, models_dir), models_dir)
        embedder.load()
        embedder.embed_passages(["warm up"])
        self.app = Appliance(settings, embedder=embedder)

    def sync(self, label: str) -> dict[str, Any]:
        self.embedded = 0
        started = time.monotonic()
        report = self.app.sync()
        seconds = time.monotonic() - started
        assert report.ok, report.failed
        return {"step": label, "chunksWritten": report.chunks, "chunksEmbedded": self.embedded,
                "seconds": round(seconds, 1), "files": report.seen}


def scenarios(work: Path, shared: Path, models_dir: Path, log: Callable[[str], None],
              only: set[str]) -> list[dict[str, Any]]:
    texts = abstracts(shared, 2 * PAGES + FILES)
    long_docs, small_docs = texts[:2 * PAGES], texts[2 * PAGES:]
    results = []

    def run(m: Measure, label: str) -> None:
        results.append(m.sync(label))
        log(json.dumps(results[-1]))

    changed = list(long_docs)
    changed[PAGES] = (changed[PAGES][0], edited(changed[PAGES][1]))
    long_cases = (("pdf", "long.pdf", write_long_pdf, f"(a) first sync of a {PAGES}-page PDF",
                   "(a) one paragraph of the PDF edited"),
                  ("markdown", "long.md", write_long_markdown,
                   f"(a2) first sync of a Markdown file of {len(long_docs)} sections",
                   "(a2) one paragraph of the Markdown edited"))
    for name, filename, write, first, edit in long_cases:
        if name in only:
            case = Measure(work, name, models_dir)
            write(case.docs / filename, long_docs)
            run(case, first)
            write(case.docs / filename, changed)
            run(case, edit)
    if "folder" not in only:
        return results
    folder = Measure(work, "folder", models_dir)
    (folder.docs / "papers").mkdir()
    for n, (title, text) in enumerate(small_docs):
        (folder.docs / "papers" / f"paper-{n:03d}.md").write_text(f"# {title}\n\n{text}\n", "utf-8")
    run(folder, f"(b) first sync of a folder of {FILES} files")
    (folder.docs / "papers").rename(folder.docs / "renamed")
    run(folder, "(b) the folder renamed")
    shutil.copytree(folder.docs / "renamed", folder.docs / "copy")
    run(folder, "(c) the folder copied")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose appliance package is measured")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=SCENARIOS, help="run only these cases")
    args = parser.parse_args()
    code = args.code.resolve()
    sys.path[:0] = [str(code), str(ROOT)]  # the measured package first; this checkout's test fixtures after it
    import appliance

    if Path(appliance.__file__).resolve().parent != code / "appliance":
        raise SystemExit(f"appliance imports from {appliance.__file__}, not {code}")
    from tests.conftest import shared_path

    models_dir = Path(os.environ.get("MODELS_DIR", ROOT / "models" / "baked"))
    revision = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                              check=False,
                              text=True).stdout.strip() or "not a git checkout"
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        results = scenarios(work, shared_path(), models_dir, log, set(args.only))
    load = os.getloadavg()
    out = {"code": str(code), "revision": revision, "loadAverage": [round(x, 2) for x in load], "results": results}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"code {code} ({revision}), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
