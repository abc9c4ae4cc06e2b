#!/usr/bin/env python3
"""The long-manual set's documents, rebuilt from pinned Debian documentation packages.

Usage: manuals_set.py [--cache .cache/eval/manuals] [--check]

Each package is fetched with `apt-get download PACKAGE=VERSION` (the machine's apt sources; run
`apt-get update` first), its sha256 checked against the pin below, unpacked with `dpkg-deb -x`,
and the chosen files copied to `<cache>/docs/<package>/<name>` (`.gz` text decompressed). Nothing
of it is committed: the questions (scripts/eval_data/manuals_questions.jsonl) are our own text,
the documents come from the packages. `--check` also reports every question whose snippet is not
in its document's converted text (a snippet must be verbatim, up to whitespace).

The manuals are chosen so that no two are translations of each other: a German question about an
English manual must find the English passage, not a German twin of it.
"""
from __future__ import annotations

import argparse
import fnmatch
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "eval" / "manuals"
QUESTIONS = ROOT / "scripts" / "eval_data" / "manuals_questions.jsonl"

PACKAGES: dict[str, tuple[str, str, list[str]]] = {
    # package: (version, sha256 of the .deb, globs of the files taken, relative to the unpacked tree)
    "debian-reference-en": ("2.100", "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
                            ["usr/share/debian-reference/ch02.en.html"]),
    "debian-policy": ("4.6.2.0", "ef9d01b625c3b87c3a845c2cd1b66f1a16e9240b2b9e5bee53472a00e8457a39",
                      ["usr/share/doc/debian-policy/policy.epub", "usr/share/doc/debian-policy/fhs/fhs-3.0.txt.gz"]),
    "apt-doc": ("2.6.2", "7588436ff4bd6812cf1cea65de4fe64bf98d84c6b022714f8453e8a6e89079d9",
                ["usr/share/doc/apt-doc/offline.text.gz", "usr/share/doc/apt-doc/guide.de.text.gz"]),
    "debian-reference-de": ("2.100", "3b0ce65fd63e75ddf8eb07ca36293425135080e690a07e06a6ac8bc8040ef0aa",
                            ["usr/share/debian-reference/ch03.de.html", "usr/share/debian-reference/ch04.de.html"]),
    "debian-edu-doc-de": ("2.12.23~deb12u1", "8bf494be7b24baf3b84cf080421357a01938e0f643971d6fb58834612882f2bc",
                          ["usr/share/doc/debian-edu-doc-de/debian-edu-bookworm-manual.pdf"]),
    "debian-paketmanagement-buch": (
        "0~2023.03.11", "18038c255e8f0b0d4d48e18e55bab78d30d318cddf2cf05a556c1d0f2414b230",
        ["usr/share/doc/debian-paketmanagement-buch/debian-paketmanagement.epub"]),
    "aptitude-doc-ru": ("0.8.13-5", "0d38f3888b2510d2a294ff32622fce0af44a1bdc0f8f1979165301dffde14ba2",
                        ["usr/share/doc/aptitude/html/ru/*.html"]),
    "doublecmd-help-ru": ("1.0.10-1", "81d380674da3b6daf2d12101d0937d1ca978cc66c64220ae55a393994f325f2c",
                          [f"usr/share/doublecmd/doc/ru/{n}.html"
                           for n in ("help", "configuration", "findfiles", "multirename", "viewer", "syncdirs")]),
    "ubuntu-packaging-guide-epub-ru": (
        "1.0.4", "de45f668c0812a92124fae67a8f9595ac7b20c46152f944c0295704671844bf7",
        ["usr/share/doc/ubuntu-packaging-guide-epub-ru/ubuntu-packaging-guide.epub"]),
}
"""Debian 12 (bookworm) versions; a rebuild with another version fails on the checksum, not silently."""


def fetch(package: str, version: str, sha256: str, debs: Path) -> Path:
    """The package's .deb under `debs`, downloaded once and checked against its pin."""
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        if shutil.which("apt-get") is None:
            sys.exit(f"error: {package}_{version} is not in {debs} and there is no apt-get to download it "
                     "(the set is built from Debian packages: run on Debian, or copy the .deb files there)")
        result = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs,
                                capture_output=True, text=True)
        found = sorted(debs.glob(f"{package}_*.deb"))
        if result.returncode or not found:
            sys.exit(f"error: apt-get download {package}={version} failed (run `apt-get update`; "
                     f"is bookworm in the apt sources?): {result.stderr.strip()[-400:]}")
    digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
    if digest != sha256:
        sys.exit(f"error: {found[0]} has sha256 {digest}, the set pins {sha256}: delete it to download again")
    return found[0]


def unpack(deb: Path, globs: list[str], target: Path) -> list[Path]:
    """The files of `deb` matching `globs`, copied flat into `target` (text .gz decompressed)."""
    target.mkdir(parents=True, exist_ok=True)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        tree = Path(tmp)
        members = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
        for pattern in globs:
            matched = [m for m in members if fnmatch.fnmatch(m, pattern)]
            if not matched:
                sys.exit(f"error: {deb.name} holds no file matching {pattern}")
            for member in matched:
                name = Path(member).name
                if name.endswith(".gz"):
                    name = name.removesuffix(".gz")
                    name = name if name.endswith(".txt") else name.replace(".text", "") + ".txt"
                    (target / name).write_bytes(gzip.decompress((tree / member).read_bytes()))
                else:
                    shutil.copyfile(tree / member, target / name)
                out.append(target / name)
    return out


def build(cache: Path = CACHE) -> Path:
    """The documents folder `<cache>/docs` (built once; a `.complete` marker says it is whole)."""
    docs = cache / "docs"
    marker = docs / ".complete"
    if marker.exists():
        return docs
    # Under the project's git-ignored .cache, discovery would skip every file: an empty .git makes
    # the folder a repository top of its own (as eval_retrieval.materialise does).
    (docs / ".git").mkdir(parents=True, exist_ok=True)
    for package, (version, sha256, globs) in PACKAGES.items():
        unpack(fetch(package, version, sha256, cache / "debs"), globs, docs / package)
    marker.write_text("ok")
    return docs


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--check", action="store_true", help="convert every document and look for each snippet")
    args = parser.parse_args()
    docs = build(args.cache)
    files = sorted(p for p in docs.rglob("*") if p.is_file() and ".git" not in p.parts and p.name != ".complete")
    print(f"{len(files)} files under {docs}")
    if args.check:
        sys.path.insert(0, str(ROOT))
        from appliance.ingest.convert import to_markdown

        questions = load_questions()
        texts: dict[str, str] = {}
        for q in questions:
            if q["file"] not in texts:
                converted = to_markdown(docs / q["file"], ocr=None, max_file_size=1 << 30)
                texts[q["file"]] = " ".join(converted.markdown.split())
            if " ".join(q["snippet"].split()) not in texts[q["file"]]:
                print(f"snippet not found: {q['id']} in {q['file']}: {q['snippet'][:80]!r}")


if __name__ == "__main__":
    main()
