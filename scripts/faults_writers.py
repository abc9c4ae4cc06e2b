#!/usr/bin/env python3
"""Many writers on one index: a syncing process, an ingesting process and a reader at once.

Usage: faults_writers.py [--seconds 600] [--files 60] [--model real|tiny] [--json]

This is the appliance's normal state (the scheduler and the MCP server are separate
processes in every container; users run `make sync` or a second client beside them).
For --seconds, three processes share one DB_PATH:

* sync: changes a few files (edits, new files, deletions) and runs `Appliance.sync()`, again and again;
* ingest: `ingest_data` of a new item, and now and then `delete` of an earlier one;
* read: `search`, `status` and `list_files` in a loop.

Then one more sync runs, and the index must hold every item the ingest process was told
was stored (and none it deleted), every file with consecutive chunks inside the keyword
index, and no process may have seen an error other than `sync_busy`. LanceDB's retryable
commit conflicts are counted per process: the store repeats such a write, so they show
up as `conflictsRetried`, never as failures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.storage.writes import FOLD_DUE_ROWS  # noqa: E402
from scripts.faults_crash import QUERIES, Checker, generated_text, make_lab  # noqa: E402

ROLES = ("sync", "ingest", "read")


def _error(exc: BaseException) -> str:
    return getattr(exc, "code", None) or f"{type(exc).__name__}"


def role_main(role: str, env: dict[str, str], docs: Path, until: float, seed: int) -> dict[str, Any]:
    """One writer or reader until `until`; returns what it did and what it saw."""
    checker = Checker(env)
    app = checker.fresh()
    rng = random.Random(seed)
    out: dict[str, Any] = {"role": role, "ops": 0, "errors": {}, "examples": [], "stored": [], "deleted": []}
    n = 0
    while time.time() < until:
        n += 1
        try:
            if role == "sync":
                gen = sorted((docs / "gen").glob("*"))
                for path in rng.sample(gen, k=min(3, len(gen))):
                    path.write_text(path.read_text("utf-8") + f"\nEdited in round {n}.\n", "utf-8")
                (docs / "gen" / f"new_{n:04d}.md").write_text(generated_text(rng, 5000 + n, 2), "utf-8")
                if n % 4 == 0 and gen:
                    rng.choice(gen).unlink(missing_ok=True)
                app.sync()
            elif role == "ingest":
                sid = f"writers/item-{n:05d}"
                app.ingest_data(sid, f"# Item {n}\n\n" + generated_text(rng, 9000 + n, 1), "markdown")
                out["stored"].append(sid)
                if n % 7 == 0:
                    victim = out["stored"][-4] if len(out["stored"]) >= 4 else sid
                    app.delete(victim, is_source=True)
                    out["stored"].remove(victim)
                    out["deleted"].append(victim)
            else:
                app.search(QUERIES[n % len(QUERIES)], top_k=5)
                status = app.status().wire()
                if "indexError" in status:
                    raise RuntimeError(f"status: {status['indexError']}")
                app.list_files()
                time.sleep(0.1)
            out["ops"] += 1
        except Exception as exc:  # noqa: BLE001 - every exception is a finding, counted by its name
            code = _error(exc)
            out["errors"][code] = out["errors"].get(code, 0) + 1
            if code != "sync_busy" and len(out["examples"]) < 5:
                out["examples"].append(f"{type(exc).__name__}: {exc}"[:500])
            time.sleep(0.2)
    out["conflictsRetried"] = app.index.conflicts_retried
    return out


def run(seconds: float, files: int, model: str, seed: int = 0) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="minirag-writers-"))
    lab = make_lab(work, files, model, seed)
    until = time.time() + seconds
    procs = {role: subprocess.Popen(
        [sys.executable, __file__, "--role", role, "--docs", str(lab.docs), "--until", str(until),
         "--seed", str(seed + i)], env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, role in enumerate(ROLES)}
    roles: dict[str, Any] = {}
    for role, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=seconds + 1800)
        try:
            roles[role] = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            roles[role] = {"role": role, "crashed": proc.returncode, "stderr": stderr[-2000:]}
    checker = Checker(lab.env)
    final = checker.fresh().sync()
    snap = checker.snapshot()
    status = checker.fresh().status().wire()
    stored = set(roles["ingest"].get("stored", []))
    deleted = set(roles["ingest"].get("deleted", []))
    data = {sid for sid in snap["sources"] if not sid.startswith("/")}
    problems = []
    for role, result in roles.items():
        if "crashed" in result:
            problems.append(f"{role} crashed: {result['stderr'][-500:]}")
        bad = {k: v for k, v in result.get("errors", {}).items() if k != "sync_busy"}
        if bad:
            problems.append(f"{role} saw errors {bad}: {result['examples'][:2]}")
    if stored - data:
        problems.append(f"{len(stored - data)} stored items are missing, e.g. {sorted(stored - data)[:3]}")
    if deleted & data:
        problems.append(f"{len(deleted & data)} deleted items came back, e.g. {sorted(deleted & data)[:3]}")
    wrong = [sid for sid, count in snap["sources"].items() if snap["chunks"].get(sid, 0) != count]
    if wrong:
        problems.append(f"{len(wrong)} sources whose chunks differ from their record, e.g. {wrong[:3]}")
    if snap["duplicates"]:
        problems.append(f"duplicates: {snap['duplicates']}")
    if snap["unindexed"] >= FOLD_DUE_ROWS:  # fewer may wait for the next fold (searched meanwhile)
        problems.append(f"unindexed: {snap['unindexed']}")
    if snap["gaps"]:
        problems.append(f"chunk indexes with gaps: {snap['gaps'][:3]}")
    if not final.ok:
        problems.append(f"the final sync failed files: {final.failed[:3]}")
    for key in ("consistencyWarning", "identityWarning"):
        if key in status.get("index", {}):
            problems.append(f"status: {status['index'][key]}")
    return {
        "seconds": seconds, "files": len(lab.files), "model": model,
        "roles": {role: {k: v for k, v in r.items() if k not in ("stored", "deleted")} for role, r in roles.items()},
        "conflictsRetried": sum(r.get("conflictsRetried", 0) for r in roles.values()),
        "itemsStored": len(stored), "itemsDeleted": len(deleted), "problems": problems, "work": str(work),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--model", choices=("real", "tiny"), default="real")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(role_main(args.role, dict(os.environ), Path(args.docs), args.until, args.seed)))
        return
    result = run(args.seconds, args.files, args.model, args.seed)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['seconds']:.0f} s, {result['files']} files, model {result['model']}: "
              f"{result['conflictsRetried']} commit conflicts retried; "
              f"{result['itemsStored']} items stored, {result['itemsDeleted']} deleted")
        for role, r in result["roles"].items():
            print(f"  {role:7s} ops {r.get('ops')}, conflicts retried {r.get('conflictsRetried')}, "
                  f"errors {r.get('errors')}")
        print("problems: " + ("; ".join(result["problems"]) if result["problems"] else "none"))
    sys.exit(1 if result["problems"] else 0)


if __name__ == "__main__":
    main()
