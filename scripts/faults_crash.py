#!/usr/bin/env python3
"""Crash safety: kill -9 `minirag sync` and `minirag ingest FILE` at random moments.

Usage: faults_crash.py [--trials 50] [--files 300] [--model real|tiny] [--seed N] [--json]

A corpus of a few hundred files (real documents of mixed formats copied from
$MINIRAG_SHARED/corpus, scans left out, plus generated Markdown and text) is
indexed once with `sync --clean`: that build is the reference (source set and
chunk count per source). Then every trial

* makes work for the next process: forgets some sources in the index, hides
  some files and adds a few new ones (sync trials), or picks a large file to
  re-ingest (ingest trials, every third trial);
* starts the real `minirag` process with a query loop running against the same
  DB_PATH in a thread of this process, and kills it with SIGKILL after a random
  delay (uniform over the time such a run takes);
* checks that its conversion workers went away with it, that the index opens
  and every query answers, restores the files, runs one more `minirag sync` and
  checks that it converges to exactly the reference (same sources, same chunk
  count per source in both tables, no duplicate ids, chunk indexes 0..n-1, no
  failed sources, nothing left out of the keyword index).

The recovery time is the wall time of that converging sync (process start
included). Nothing from the shared folder is written anywhere but a temp dir.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.storage.writes import FOLD_DUE_ROWS  # noqa: E402

SUPPORTED = {".md", ".txt", ".pdf", ".docx", ".pptx", ".xlsx", ".xls", ".html", ".htm", ".csv", ".epub",
             ".ipynb", ".json"}
WORDS = ["harbour", "lantern", "meadow", "copper", "violin", "orbit", "basalt", "ferry", "quartz", "glacier", "ledger",
         "turbine", "invoice", "schedule", "backup", "replica", "river", "bridge", "tunnel", "signal", "archive",
         "река", "мост", "город", "ветер", "поле", "Haus", "Brücke", "Wald", "Stadt", "Fluss"]
QUERIES = ["how often are backups verified", "FAULTKEY_0003", "Когда обновляются индексы?",
           "Brücke über den Fluss", "invoice total amount", "table of contents"]
TINY_BUDGET = "128"


# ---- the environment: model, corpus, processes -------------------------------------------
def shared_corpus(shared: Path | None = None) -> Path:
    path = Path(shared or os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared")) / "corpus"
    if not path.is_dir():
        raise SystemExit(f"shared test data is missing: {path} (set MINIRAG_SHARED)")
    return path


def model_env(kind: str, work: Path) -> dict[str, str]:
    """Environment naming the model: the baked int8 model, or a tiny random-weight one baked here."""
    if kind == "real":
        return {"MODELS_DIR": str(ROOT / "models" / "baked")}
    from tests.fixtures.tiny_model import manifest_toml, write_tiny_model

    models = work / "models"
    spec = write_tiny_model(models, max_seq_length=512)
    manifest = work / "manifest.toml"
    manifest.write_text(manifest_toml(spec, f'kind = "huggingface"\nrepo = "{spec.id}"\nrevision = "{"0" * 40}"'),
                        "utf-8")
    return {"MODELS_DIR": str(models), "MODELS_MANIFEST": str(manifest), "MODEL_NAME": spec.id,
            "CHUNK_TOKEN_BUDGET": TINY_BUDGET}


def scanned(corpus: Path) -> set[str]:
    expected = corpus / "EXPECTED.tsv"
    if not expected.is_file():
        return set()
    rows = [line.split("\t") for line in expected.read_text("utf-8").splitlines()[1:]]
    return {r[0] for r in rows if len(r) >= 5 and r[4].strip() == "yes"}


def generated_text(rng: random.Random, n: int, paragraphs: int) -> str:
    body = []
    for p in range(paragraphs):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 90)))
        body.append(f"## Part {p + 1}\n\n{words}. Reference FAULTKEY_{n:04d} item {p}.")
    return f"# Note {n}\n\n" + "\n\n".join(body) + "\n"


def build_corpus(dest: Path, files: int, seed: int = 0, max_bytes: int = 20_000,
                 shared: Path | None = None) -> list[Path]:
    """Copy about 4/5 of `files` small non-scanned documents of every format, generate the rest."""
    corpus = shared_corpus(shared)
    rng = random.Random(seed)
    skip = scanned(corpus)
    by_ext: dict[str, list[Path]] = {}
    for path in sorted(corpus.rglob("*")):
        rel = path.relative_to(corpus)
        if (path.is_file() and path.suffix.lower() in SUPPORTED and "ocr" not in rel.parts
                and str(rel) not in skip and not path.name.startswith((".", "~$"))
                and 0 < path.stat().st_size <= max_bytes):
            by_ext.setdefault(path.suffix.lower(), []).append(path)
    for paths in by_ext.values():
        rng.shuffle(paths)
    want_real = files * 4 // 5
    picked: list[Path] = []
    while len(picked) < want_real and any(by_ext.values()):
        for ext in sorted(by_ext):
            if by_ext[ext] and len(picked) < want_real:
                picked.append(by_ext[ext].pop())
    out = []
    (dest / "real").mkdir(parents=True, exist_ok=True)
    (dest / "gen").mkdir(parents=True, exist_ok=True)
    for n, path in enumerate(picked):
        target = dest / "real" / f"{n:03d}_{path.name.replace(' ', '_')}"
        shutil.copyfile(path, target)
        out.append(target)
    for n in range(files - len(picked)):
        target = dest / "gen" / (f"note_{n:03d}.md" if n % 2 == 0 else f"note_{n:03d}.txt")
        target.write_text(generated_text(rng, n, rng.randint(1, 8)), "utf-8")
        out.append(target)
    return out


def minirag_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "appliance", *args]


def run(args: list[str], env: dict[str, str], timeout: float = 1800) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(minirag_cmd(*args), env=env, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


def descendants(pid: int) -> list[int]:
    """Every process below pid, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after `seconds` (each then killed, so nothing leaks past a trial)."""
    deadline = time.monotonic() + seconds
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def kill_after(args: list[str], env: dict[str, str], delay: float) -> dict[str, Any]:
    """Start minirag, SIGKILL it after `delay` s unless it ended; report what happened."""
    started = time.monotonic()
    proc = subprocess.Popen(minirag_cmd(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=delay)
    below = descendants(proc.pid)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    _out, err = proc.communicate()
    orphans = wait_gone(below, 15.0)
    return {"killed": killed, "delay": round(delay, 2), "ran": round(time.monotonic() - started, 2),
            "rc": proc.returncode, "stderrTail": err[-400:] if not killed else "", "children": len(below),
            "orphans": orphans}


# ---- checking the index --------------------------------------------------------------
class Checker:
    """Opens the index afresh (as a new process would) and compares it with a reference."""

    def __init__(self, env: dict[str, str], embedder=None) -> None:  # type: ignore[no-untyped-def]
        from appliance.config import load_settings
        from appliance.embed import OnnxEmbedder
        from appliance.models.manifest import load_manifest

        self.settings = load_settings(env)
        if embedder is not None:
            self.embedder = embedder
            return
        manifest = env.get("MODELS_MANIFEST")  # read here, so this process's own environment stays as it is
        manifest_path = Path(manifest) if manifest else None
        spec = load_manifest(manifest_path, self.settings.models_dir).spec(self.settings.model_name)
        self.embedder = OnnxEmbedder(spec, self.settings.models_dir, threads=self.settings.embed_threads)
        self.embedder.load()

    def fresh(self, db: Path | None = None):  # type: ignore[no-untyped-def]
        """A new Appliance (new table handles) on the index, or on another index at `db`."""
        from dataclasses import replace

        from appliance.service import Appliance

        settings = replace(self.settings, db_path=db) if db is not None else self.settings
        return Appliance(settings, embedder=self.embedder)

    def queries(self, app=None) -> list[str]:  # type: ignore[no-untyped-def]
        """Problems answering QUERIES and `status` on a freshly opened index (empty when all answer)."""
        app = app or self.fresh()
        problems = []
        try:
            status = app.status().wire()
            if "indexError" in status:
                problems.append(f"status: {status['indexError']}")
        except Exception as exc:  # noqa: BLE001 - any exception is a finding
            problems.append(f"status raised {type(exc).__name__}: {exc}")
        for q in QUERIES:
            try:
                app.search(q, top_k=5)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"query {q!r} raised {type(exc).__name__}: {exc}")
        return problems

    def snapshot(self, db: Path | None = None) -> dict[str, Any]:
        """Per-source chunk counts (chunks table and sources table) and integrity facts."""
        app = self.fresh(db)
        rows = app.index.reader.chunk_rows("chunk_index >= 0", ["id", "source_id", "chunk_index"])
        chunks: dict[str, list[int]] = {}
        for row in rows:
            chunks.setdefault(row["source_id"], []).append(row["chunk_index"])
        ids = [row["id"] for row in rows]
        sources = app.index.registry.source_rows()
        return {
            "chunks": {k: len(v) for k, v in chunks.items()},
            "sources": {s.source_id: s.chunk_count for s in sources},
            "failed": {s.source_id: f"{s.error_code}: {s.error}" for s in sources if s.error_code},
            "ocr": sorted(s.source_id for s in sources if s.ocr_engine),
            "duplicates": len(ids) - len(set(ids)),
            "gaps": sorted(k for k, v in chunks.items() if sorted(v) != list(range(len(v)))),
            "unindexed": app.index.writes.unindexed_rows(),
            "identity": app.index.read_identity() is not None,
        }

    def differences(self, reference: dict[str, int], db: Path | None = None) -> list[str]:
        """How the index differs from the reference build (empty when it is exactly it)."""
        try:
            snap = self.snapshot(db)
        except Exception as exc:  # noqa: BLE001 - an index that cannot be read differs
            return [f"the index cannot be read: {type(exc).__name__}: {exc}"]
        problems = []
        for table in ("chunks", "sources"):
            got = snap[table]
            missing = sorted(set(reference) - set(got))
            extra = sorted(set(got) - set(reference))
            wrong = sorted(k for k in set(got) & set(reference) if got[k] != reference[k])
            if missing:
                problems.append(f"{table}: {len(missing)} sources missing, e.g. {missing[:3]}")
            if extra:
                problems.append(f"{table}: {len(extra)} unexpected sources, e.g. {extra[:3]}")
            if wrong:
                problems.append(f"{table}: {len(wrong)} sources with another chunk count, e.g. "
                                + ", ".join(f"{k} {got[k]} != {reference[k]}" for k in wrong[:3]))
        if snap["failed"]:
            problems.append(f"failed sources: {list(snap['failed'].items())[:3]}")
        if snap["duplicates"]:
            problems.append(f"{snap['duplicates']} duplicate chunk ids")
        if snap["gaps"]:
            problems.append(f"chunk indexes not 0..n-1 for {snap['gaps'][:3]}")
        if snap["unindexed"] >= FOLD_DUE_ROWS:  # fewer may wait for the next fold (searched meanwhile)
            problems.append(f"{snap['unindexed']} rows outside the keyword index")
        if not snap["identity"]:
            problems.append("identity.json is missing")
        return problems


class QueryLoop(threading.Thread):
    """Service searches against DB_PATH, one long-lived Appliance, while the trials run."""

    def __init__(self, checker: Checker, pause: float = 0.2) -> None:
        super().__init__(daemon=True, name="query-loop")
        self.app = checker.fresh()
        self.pause = pause
        self.stop = threading.Event()
        self.count = 0
        self.errors: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            query = QUERIES[n % len(QUERIES)]
            n += 1
            try:
                self.app.search(query, top_k=5)
                self.count += 1
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            self.stop.wait(self.pause)

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors


# ---- the trials -----------------------------------------------------------------------
@dataclass
class Lab:
    """One corpus, its index and the clean-build reference."""

    work: Path
    docs: Path
    env: dict[str, str]
    files: list[Path]
    reference: dict[str, int] = field(default_factory=dict)
    build_seconds: float = 0.0
    dropped: list[str] = field(default_factory=list)
    ref_copy: Path | None = None

    @property
    def db(self) -> Path:
        return Path(self.env["DB_PATH"])


def make_lab(work: Path, files: int, model: str, seed: int = 0, max_bytes: int = 20_000,
             shared: Path | None = None) -> Lab:
    """Build the corpus, index it clean, leave out files that fail or need OCR, and take the reference."""
    docs = work / "docs"
    paths = build_corpus(docs, files, seed, max_bytes, shared)
    env = {**os.environ, **model_env(model, work), "BASE_DIR": str(docs), "DB_PATH": str(work / "index"),
           "PYTHONPATH": str(ROOT)}
    lab = Lab(work, docs, env, paths)
    proc, lab.build_seconds = run(["sync", "--clean", "--json"], env)
    checker = Checker(env)
    snap = checker.snapshot()
    bad = set(snap["failed"]) | set(snap["ocr"])
    if bad:  # not what this suite is about: a clean build must succeed without OCR
        for path in bad:
            Path(path).unlink(missing_ok=True)
        lab.files = [p for p in lab.files if str(p) not in bad]
        lab.dropped = sorted(bad)
        proc, lab.build_seconds = run(["sync", "--clean", "--json"], env)
    if proc.returncode != 0:
        raise SystemExit(f"the reference build failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    lab.reference = checker.snapshot()["chunks"]
    return lab


def make_work(lab: Lab, rng: random.Random, stash: Path,
              checker: Checker) -> tuple[list[tuple[Path, Path]], list[Path]]:
    """Forget some sources, hide some files, add some: the next sync has something to do."""
    n = len(lab.files)
    forget = rng.sample(sorted(lab.reference), k=min(len(lab.reference), rng.randint(3, max(4, n // 15))))
    app = checker.fresh()
    app.index.writes.delete_sources(forget)
    hidden = []
    for path in rng.sample(lab.files, k=rng.randint(1, max(2, n // 30))):
        target = stash / path.relative_to(lab.docs)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        hidden.append((path, target))
    extra = []
    for i in range(rng.randint(1, max(2, n // 30))):
        path = lab.docs / "gen" / f"extra_{i:03d}.md"
        path.write_text(generated_text(rng, 9000 + i, rng.randint(1, 6)), "utf-8")
        extra.append(path)
    return hidden, extra


def trial(lab: Lab, checker: Checker, loop: QueryLoop, rng: random.Random, number: int,
          estimates: dict[str, list[float]]) -> dict[str, Any]:
    kind = "ingest" if number % 3 == 2 else "sync"
    stash = lab.work / "stash"
    hidden: list[tuple[Path, Path]] = []
    extra: list[Path] = []
    if kind == "sync":
        hidden, extra = make_work(lab, rng, stash, checker)
        args = ["sync", "--json"]
    else:
        biggest = sorted(lab.reference, key=lambda k: -lab.reference[k])[:20]
        args = ["ingest", rng.choice(biggest), "--json"]
    est = statistics.median(estimates[kind][-5:])
    delay = rng.uniform(0.05, est * 1.1)
    loop.take_errors()
    result: dict[str, Any] = {"trial": number, "kind": kind, **kill_after(args, lab.env, delay)}
    problems = []
    if result["orphans"]:
        problems.append(f"processes outlived the killed {kind}: {result['orphans']}")
    if not result["killed"]:
        estimates[kind].append(result["ran"])
        if result["rc"] != 0:
            problems.append(f"{kind} exited {result['rc']} before the kill: {result['stderrTail']}")
    for path, target in hidden:
        target.rename(path)
    for path in extra:
        path.unlink()
    problems += [f"after the kill, {p}" for p in checker.queries()]
    proc, seconds = run(["sync", "--json"], lab.env)
    result["recoverySeconds"] = round(seconds, 2)
    if kind == "sync":
        estimates["sync"].append(seconds)
    if proc.returncode != 0:
        problems.append(f"the converging sync exited {proc.returncode}: {(proc.stderr or proc.stdout)[-600:]}")
    problems += [f"after the converging sync, {p}" for p in checker.differences(lab.reference)]
    problems += [f"after the converging sync, {p}" for p in checker.queries()]
    problems += [f"concurrent query failed: {e}" for e in loop.take_errors()[:3]]
    result["problems"] = problems
    return result


def crash_trials(lab: Lab, trials: int, seed: int = 1, log=None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Run the kill trials on a lab whose index equals its reference; return the summary."""
    rng = random.Random(seed)
    checker = Checker(lab.env)
    loop = QueryLoop(checker)
    loop.start()
    estimates = {"sync": [max(lab.build_seconds / 3, 3.0)], "ingest": [6.0]}
    results = []
    try:
        for number in range(trials):
            result = trial(lab, checker, loop, rng, number, estimates)
            results.append(result)
            if log:
                log(f"trial {number + 1}/{trials} {result['kind']:6} killed={result['killed']!s:5} "
                    f"delay={result['delay']:5.1f}s recovery={result['recoverySeconds']:5.1f}s "
                    f"{'OK' if not result['problems'] else 'FAIL ' + '; '.join(result['problems'])[:500]}")
    finally:
        loop.stop.set()
        loop.join(10)
    recovery = [r["recoverySeconds"] for r in results]
    failures = [{"trial": r["trial"], "kind": r["kind"], "delay": r["delay"], "killed": r["killed"],
                 "problems": r["problems"]} for r in results if r["problems"]]
    return {
        "trials": len(results),
        "survived": len(results) - len(failures),
        "killedMidRun": sum(r["killed"] for r in results),
        "childrenAtKill": sum(r["children"] for r in results if r["killed"]),
        "orphans": sum(len(r["orphans"]) for r in results),
        "byKind": {k: sum(r["kind"] == k for r in results) for k in ("sync", "ingest")},
        "failures": failures,
        "worstRecoverySeconds": max(recovery) if recovery else None,
        "medianRecoverySeconds": round(statistics.median(recovery), 2) if recovery else None,
        "concurrentQueries": loop.count,
        "referenceSources": len(lab.reference),
        "referenceChunks": sum(lab.reference.values()),
        "referenceBuildSeconds": round(lab.build_seconds, 1),
        "droppedFromCorpus": len(lab.dropped),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--model", choices=("real", "tiny"), default="real",
                        help="real: the baked int8 model in models/baked; tiny: a random-weight model baked here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="minirag-faults-crash-"))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        started = time.monotonic()
        lab = make_lab(work, args.files, args.model, seed=args.seed)
        log(f"reference: {len(lab.reference)} sources, {sum(lab.reference.values())} chunks, "
            f"clean build {lab.build_seconds:.1f} s ({len(lab.dropped)} failing/OCR files left out)")
        summary = crash_trials(lab, args.trials, seed=args.seed, log=log)
        summary |= {"files": len(lab.files), "model": args.model, "seconds": round(time.monotonic() - started, 1)}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(f"trials {summary['trials']} ({summary['byKind']}), survived {summary['survived']}, "
              f"killed mid-run {summary['killedMidRun']}")
        print(f"recovery (converging sync): worst {summary['worstRecoverySeconds']} s, "
              f"median {summary['medianRecoverySeconds']} s; {summary['concurrentQueries']} concurrent queries")
        for failure in summary["failures"]:
            print(f"FAIL trial {failure['trial']} ({failure['kind']}, delay {failure['delay']} s): "
                  + "; ".join(failure["problems"]))
    sys.exit(0 if not summary["failures"] else 1)


if __name__ == "__main__":
    main()
