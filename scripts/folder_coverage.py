#!/usr/bin/env python3
"""How much of a real documentation folder a sync indexes, and what it says about the rest.

Usage: folder_coverage.py [--folder DIR | --every N --limit N --max-kb N] [--tree DIR] [--no-sync] [--json]

Without --folder, a folder is built in a temporary directory from this machine's
/usr/share/doc (every Nth regular file of at most --max-kb KB of text, in path order, at most --limit of them)
and /usr/share/common-licenses: the kind of folder issue 30 was found on. Then `minirag
sync` and `minirag list --ignored` run as child processes (the appliance of --tree: this
checkout by default, or an older one for "before" figures) with BASE_DIR and DB_PATH on
temporary directories, and the script prints:

* files present (regular files, not hidden), indexed, failed, skipped by code, and files
  neither indexed nor named anywhere (the silent ones);
* what the content check costs per file of no listed type (an 8 KB read, formats.unlisted_reason)
  against Magika's `identify_path` on the same files, when magika is installed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (Path("/usr/share/doc"), Path("/usr/share/common-licenses"))


def text_size(path: Path) -> int:
    """Bytes of the file, decompressed for .gz (what a sync would embed)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as fh:
            return sum(len(block) for block in iter(lambda: fh.read(1 << 16), b""))
    except (OSError, EOFError, zlib.error):
        return path.stat().st_size


def build_folder(dest: Path, every: int, limit: int, max_kb: int) -> None:
    """Every `every`th file of /usr/share/doc of at most `max_kb` KB (decompressed) up to `limit`,
    and every licence text. The size cap keeps the sync to minutes on a 2-core machine: the
    largest changelogs alone hold megabytes of text."""
    picked = []
    doc = SOURCES[0]
    for n, path in enumerate(sorted(p for p in doc.rglob("*") if p.is_file() and not p.is_symlink()), 1):
        if n % every == 0 and text_size(path) <= max_kb * 1024:
            picked.append(path)
    for path in [*picked[:limit], *sorted(p for p in SOURCES[1].iterdir() if p.is_file())]:
        base = doc if path.is_relative_to(doc) else SOURCES[1].parent
        target = dest / path.relative_to(base.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def present(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def minirag(tree: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "appliance", *args, "--json"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree), **env}, cwd=tree, check=False)
    try:
        out: dict[str, Any] = json.loads(run.stdout)
    except ValueError:
        raise SystemExit(f"minirag {' '.join(args)} failed ({run.returncode}): {run.stderr[-2000:]}") from None
    return out


def sniff_costs(files: list[Path]) -> dict[str, Any]:
    """ms per file of the content check and of Magika, on the files of no listed type."""
    sys.path.insert(0, str(ROOT))
    from appliance.ingest.formats import SUPPORTED_EXTENSIONS, unlisted_reason

    unlisted = [p for p in files if p.suffix.lower() not in SUPPORTED_EXTENSIONS]
    out: dict[str, Any] = {"unlistedFiles": len(unlisted)}
    if not unlisted:
        return out
    start = time.perf_counter()
    verdicts = [unlisted_reason(p, SUPPORTED_EXTENSIONS) for p in unlisted]
    out["contentCheckMsPerFile"] = round((time.perf_counter() - start) * 1000 / len(unlisted), 3)
    out["contentCheckText"] = sum(1 for v in verdicts if v is None)
    try:
        from magika import Magika
    except ImportError:
        return out
    start = time.perf_counter()
    magika = Magika()
    out["magikaLoadSeconds"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    labels = [magika.identify_path(p).output for p in unlisted]
    out["magikaMsPerFile"] = round((time.perf_counter() - start) * 1000 / len(unlisted), 3)
    out["magikaText"] = sum(1 for label in labels if label.is_text)
    out["disagree"] = sum(1 for v, label in zip(verdicts, labels, strict=True) if (v is None) != label.is_text)
    return out


def measure(folder: Path, tree: Path, sync: bool) -> dict[str, Any]:
    files = present(folder)
    result: dict[str, Any] = {"folder": str(folder), "tree": str(tree), "present": len(files)}
    if sync:
        with tempfile.TemporaryDirectory(prefix="coverage-db-") as db:
            env = {"BASE_DIR": str(folder), "DB_PATH": db}
            start = time.perf_counter()
            report = minirag(tree, env, "sync")
            result["syncSeconds"] = round(time.perf_counter() - start, 1)
            listing = minirag(tree, env, "list", "--ignored")
        states = collections.Counter(f["state"] for f in listing["files"])
        named = {f["filePath"] for f in listing["files"]}
        result.update(indexed=states.get("indexed", 0), failed=states.get("failed", 0),
                      states=dict(sorted(states.items())), chunks=report.get("chunks"),
                      reportSkipped=report.get("skippedCount"), reportFailed=report.get("failedCount"),
                      silent=sum(1 for p in files if str(p) not in named),
                      failures=collections.Counter(f["code"] for f in report.get("failed", [])))
    result["check"] = sniff_costs(files)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, help="measure this folder instead of building one")
    ap.add_argument("--every", type=int, default=25, help="take every Nth file of /usr/share/doc")
    ap.add_argument("--limit", type=int, default=300, help="at most this many files of /usr/share/doc")
    ap.add_argument("--max-kb", type=int, default=12, help="only files of at most this many KB of text")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the appliance checkout that runs the sync")
    ap.add_argument("--no-sync", action="store_true", help="only the content check's cost")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="coverage-folder-") as tmp:
        folder = args.folder
        if folder is None:
            folder = Path(tmp) / "docs"
            build_folder(folder, args.every, args.limit, args.max_kb)
        result = measure(folder.resolve(), args.tree.resolve(), not args.no_sync)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"folder {result['folder']} (appliance of {result['tree']})")
    print(f"present {result['present']} files")
    if "indexed" in result:
        print(f"indexed {result['indexed']}, failed {result['failed']}, states {result['states']}")
        print(f"sync: {result['syncSeconds']} s, {result['chunks']} chunks, report skipped {result['reportSkipped']}"
              f" failed {result['reportFailed']} {dict(result['failures'])}")
        print(f"named nowhere (silently left out): {result['silent']}")
    check = result["check"]
    print(f"content check: {check.get('contentCheckMsPerFile')} ms/file over {check['unlistedFiles']} files of "
          f"no listed type, {check.get('contentCheckText')} text")
    if "magikaMsPerFile" in check:
        print(f"magika: {check['magikaMsPerFile']} ms/file (+{check['magikaLoadSeconds']} s to load), "
              f"{check['magikaText']} text; the two disagree on {check['disagree']}")


if __name__ == "__main__":
    main()
