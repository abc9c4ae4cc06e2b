#!/usr/bin/env python3
"""grep's coverage on a real sample of ../shared/corpus: documents searched / documents indexed, and
how many indexed documents grep finds by a phrase of their own text, now and with the old grep.

Usage: PYTHONPATH=. scripts/grep_coverage.py [--corpus DIR] [--per-format N] [--json]

N files of each format (spread over the sorted list, 1 KB to 3 MB each; default 3) are copied
into a temporary root and synced through `Appliance` with real conversion (OCR included) and
a real LanceDB index; vectors come from the tests' hashed-words embedder, since grep never
embeds. One ingest_data item is added. Then, per indexed document, a phrase is taken from
its indexed text (the middle of the longest run of words in its middle chunk, up to 40
characters, as a person reads it: no Markdown escapes, emphasis or table pipes) and grepped for.

"Before" is the grep this one replaced: it read only files with the extensions below from
disk, line by line (so it searched no PDF, Office file, EPUB, scan or ingest_data item),
and found a phrase when one line of the raw file held it (case-insensitive). That is
computed here from the files themselves.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.ingest.textfile import read_text  # noqa: E402
from appliance.search.grep import _plain  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from tests.fixtures.embedders import HashEmbedder  # noqa: E402

OLD_GREPPABLE = {".md", ".markdown", ".txt", ".csv", ".json", ".html", ".htm"}
"""The extensions the old grep read from disk (appliance/search/grep.py's GREPPABLE_EXTENSIONS)."""
FORMATS = [".md", ".txt", ".json", ".csv", ".html", ".pdf", ".docx", ".pptx", ".xlsx", ".epub", ".png", ".jpg"]
MAX_BYTES = 3 * 1024 * 1024
MIN_BYTES = 1024
"""Smaller files of the corpus are mostly parser edge cases (a CSV of single letters), not documents."""


def sample(corpus: Path, per_format: int) -> list[Path]:
    chosen = []
    for ext in FORMATS:
        files = sorted(p for p in corpus.rglob(f"*{ext}") if p.is_file() and MIN_BYTES <= p.stat().st_size <= MAX_BYTES)
        step = max(1, len(files) // per_format)
        chosen += files[::step][:per_format]
    return chosen


def phrase_of(rows: list[dict]) -> str | None:
    """The middle (up to 40 characters) of the longest run of words in the middle chunk, as a person
    reads it: no Markdown escapes, emphasis or table pipes."""
    body = rows[len(rows) // 2]["text"][int(rows[len(rows) // 2]["body_start"] or 0):]
    runs = [run.strip() for ln in body.split("\n") for run in re.findall(r"\w[\w .,'-]*", _plain(ln)[0])]
    run = max(runs, key=len, default="")
    if len(run) < 5:
        return None
    middle = max(0, len(run) // 2 - 20)
    return run[middle:middle + 40].strip() or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--per-format", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        originals = {}
        for n, src in enumerate(sample(args.corpus, args.per_format)):
            dest = docs / src.suffix.lstrip(".") / f"{n:03d}-{src.name}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            originals[str(dest)] = str(src.relative_to(args.corpus))
        settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(Path(tmp) / "db"),
                                  "MODELS_DIR": str(ROOT / "models" / "baked")})
        app = Appliance(settings, embedder=HashEmbedder())
        report = app.sync()
        app.ingest_data("coverage-note", "# Coverage note\n\nThe ingest_data item holds the phrase "
                        "quartz lantern protocol seven.\n")
        sources = [s for s in app.index.registry.source_rows() if not s.error_code]
        result = app.grep("no such text \u2300 anywhere").wire()  # matches nothing: every document searched
        per_doc, no_phrase = [], []
        for s in sorted(sources, key=lambda s: s.source_id):
            rows = sorted(app.index.reader.chunk_rows(f"source_id = '{s.source_id.replace(chr(39), chr(39) * 2)}'",
                                               ["chunk_index", "text", "body_start"]), key=lambda r: r["chunk_index"])
            phrase = phrase_of(rows) if rows else None
            if phrase is None:
                no_phrase.append({"source": originals.get(s.source_id, s.source_id), "chunks": len(rows),
                                  "text": rows[0]["text"][:120] if rows else ""})
                continue
            found = app.grep(phrase, max_results=500).wire()
            now = any(m["source"] == s.source_id for m in found["matches"])
            path = Path(s.source_id)
            old_searched = s.source_kind == "file" and path.suffix.lower() in OLD_GREPPABLE
            old = old_searched and any(phrase.casefold() in ln.casefold()
                                       for ln in read_text(path)[0].splitlines())
            per_doc.append({"source": originals.get(s.source_id, s.source_id), "format": path.suffix.lower()
                            if s.source_kind == "file" else s.source_kind, "phrase": phrase, "now": now,
                            "before": old, "beforeSearched": old_searched})
        indexed = len(sources)
        before_searched = sum(1 for s in sources if s.source_kind == "file" and Path(s.source_id).suffix.lower()
                              in OLD_GREPPABLE)
        by_format: dict[str, Counter] = {}
        for d in per_doc:
            c = by_format.setdefault(d["format"], Counter())
            c["docs"] += 1
            c["now"] += d["now"]
            c["before"] += d["before"]
        out = {"filesSynced": report.seen, "failed": report.to_dict()["failed"], "documentsIndexed": indexed,
               "searchedBefore": before_searched, "searchedNow": result["documentsSearched"],
               "phraseDocs": len(per_doc), "phraseFoundBefore": sum(d["before"] for d in per_doc),
               "phraseFoundNow": sum(d["now"] for d in per_doc),
               "byFormat": {k: dict(v) for k, v in sorted(by_format.items())},
               "missedNow": [d for d in per_doc if not d["now"]], "noPhrase": no_phrase}
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    print(f"synced {out['filesSynced']} files ({len(out['failed'])} failed), {indexed} documents indexed "
          f"(with one ingest_data item)")
    print(f"documents searched / indexed: before {before_searched}/{indexed} = {before_searched / indexed:.0%}, "
          f"now {out['searchedNow']}/{indexed} = {out['searchedNow'] / indexed:.0%}")
    print(f"found by a phrase of their own text: before {out['phraseFoundBefore']}/{len(per_doc)}, "
          f"now {out['phraseFoundNow']}/{len(per_doc)}")
    for fmt, c in out["byFormat"].items():
        print(f"  {fmt:8} {c['docs']:3} docs: before {c.get('before', 0)}, now {c.get('now', 0)}")
    for d in out["noPhrase"]:
        print(f"  no phrase to try: {d['source']} ({d['chunks']} chunks): {d['text']!r}")
    for d in out["missedNow"]:
        print(f"  missed now: {d['source']}: {d['phrase']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
