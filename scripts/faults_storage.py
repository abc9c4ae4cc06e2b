#!/usr/bin/env python3
"""Storage faults: a disk that fills up, a read-only index, a damaged index.

Usage: faults_storage.py [--files 40] [--model real|tiny] [--free-kb 0,64,1024]
                         [--damage all|KIND,...] [--mcp all|none|KIND,...] [--json]

Needs root (mounts): the script re-executes itself in a private mount namespace
(`unshare -m`), so every tmpfs and bind mount it makes disappears with it.

* disk full: the reference index is copied onto a size-limited tmpfs, some of
  its sources are forgotten (so a sync has to write), the rest of the tmpfs is
  filled until only N KB are free, and `minirag sync` runs: it must fail with a
  named error (no traceback) or succeed, the old index must still answer
  `minirag query` and `status`, and after the filler is removed one `sync` must
  converge to exactly the reference (sources and chunk counts).
* read-only: the same on a read-only bind mount of an index as an earlier version
  left it (without each chunk's stored language): `sync` and `ingest` fail with a
  named error, `query` and `status` answer; writable again, `sync` converges.
* damaged: files inside DB_PATH are damaged (KINDS below); `minirag status`
  must answer with what is wrong and the command that fixes it, `query` must
  answer or fail with a named error, `sync` (then `sync --clean` if needed)
  must converge; `minirag serve` (MCP over stdio) must answer `initialize`,
  return tool errors as values naming the problem, and answer again after a
  `sync --clean` run beside it, without a restart.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.faults_crash import QUERIES, Checker, Lab, make_lab, minirag_cmd, run, wait_gone  # noqa: E402

NAMESPACE_FLAG = "MINIRAG_FAULTS_PRIVATE_MOUNTS"


# ---- damage -------------------------------------------------------------------------
def _latest_manifest(db: Path, table: str) -> Path:
    # Lance names manifests u64::MAX - version: the smallest name is the newest version.
    return sorted((db / f"{table}.lance" / "_versions").glob("*.manifest"))[0]


def _truncate_data(db: Path) -> None:
    data = max((db / "chunks.lance" / "data").glob("*.lance"), key=lambda p: p.stat().st_size)
    os.truncate(data, data.stat().st_size // 3)


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(300))


KINDS: dict[str, Callable[[Path], None]] = {
    "truncate-chunks-data": _truncate_data,
    "delete-latest-chunks-manifest": lambda db: _latest_manifest(db, "chunks").unlink(),
    "delete-all-chunks-manifests":
        lambda db: [p.unlink() for p in (db / "chunks.lance" / "_versions").glob("*.manifest")],
    "delete-identity": lambda db: (db / "identity.json").unlink(),
    "garbage-chunks-manifest": lambda db: _garbage(_latest_manifest(db, "chunks")),
    "garbage-sources-manifest": lambda db: _garbage(_latest_manifest(db, "sources")),
    "garbage-identity": lambda db: (db / "identity.json").write_text("{not json", "utf-8"),
}


# ---- helpers ----------------------------------------------------------------------------
def private_mounts() -> None:
    """Re-execute in a private mount namespace (root only), so no mount outlives the script."""
    if os.environ.get(NAMESPACE_FLAG):
        return
    if os.geteuid() != 0:
        raise SystemExit("faults_storage.py needs root for its tmpfs and read-only bind mounts")
    os.environ[NAMESPACE_FLAG] = "1"
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv])


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def with_db(lab: Lab, db: Path) -> dict[str, str]:
    return {**lab.env, "DB_PATH": str(db)}


def named_failure(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    """What a CLI run printed: exit status, the error line and hint, and whether a traceback leaked."""
    err = proc.stderr or ""
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "hint:"))]
    return {"rc": proc.returncode, "said": " / ".join(lines)[:600],
            "traceback": "Traceback" in err or "Traceback" in (proc.stdout or "")}


def check_cli_answers(env: dict[str, str], checker: Checker, quick: bool) -> list[str]:
    """`minirag query` and `minirag status` on env's index: both must answer (exit 0, no traceback).

    quick: status and the other queries through the service in this process (one process start less).
    """
    problems = []
    proc, _ = run(["query", QUERIES[0], "--top-k", "3", "--json"], env)
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        problems.append(f"query failed: {named_failure(proc)}")
    if quick:
        return problems + checker.queries(checker.fresh(Path(env["DB_PATH"])))
    proc, _ = run(["status"], env)
    try:
        status = json.loads(proc.stdout)
    except ValueError:
        status = {}
    if proc.returncode != 0 or "indexError" in status or "Traceback" in proc.stderr:
        problems.append(f"status: rc {proc.returncode} {status.get('indexError') or proc.stderr[-300:]}")
    return problems


def converge(lab: Lab, checker: Checker, env: dict[str, str], args: tuple[str, ...] = ("sync", "--json")) -> list[str]:
    proc, _seconds = run(list(args), env)
    problems = ([] if proc.returncode == 0
                else [f"`minirag {' '.join(args)}` exited {proc.returncode}: {named_failure(proc)}"])
    return problems + checker.differences(lab.reference, db=Path(env["DB_PATH"]))


def forget(checker: Checker, db: Path, lab: Lab, count: int) -> None:
    """Delete `count` sources from the index at db, so the next sync has to write them again."""
    app = checker.fresh(db=db)
    app.index.writes.delete_sources(sorted(lab.reference)[:count])


# ---- scenarios ------------------------------------------------------------------------------
def disk_full(lab: Lab, checker: Checker, free_kb: int, quick: bool) -> dict[str, Any]:
    """Sync on a tmpfs with only free_kb left, then with the space back."""
    mount = lab.work / f"small-{free_kb}"
    mount.mkdir()
    size = sum(p.stat().st_size for p in lab.ref_copy.rglob("*") if p.is_file())
    sh("mount", "-t", "tmpfs", "-o", f"size={size + 8 * 1024 * 1024}", "tmpfs", str(mount))
    try:
        db = mount / "index"
        shutil.copytree(lab.ref_copy, db)
        forget(checker, db, lab, max(3, len(lab.reference) // 3))
        filler = mount / "filler"
        st = os.statvfs(mount)
        with open(filler, "wb") as fh:
            fh.truncate(0)
            left = st.f_bavail * st.f_frsize - free_kb * 1024
            block = b"\0" * (1 << 20)
            try:
                while left > 0:
                    left -= fh.write(block[:min(len(block), left)])
            except OSError:
                pass
        env = with_db(lab, db)
        proc, seconds = run(["sync", "--json"], env)
        out: dict[str, Any] = {"freeKb": free_kb, "sync": named_failure(proc), "syncSeconds": round(seconds, 1)}
        with contextlib.suppress(ValueError):
            out["sync"]["error"] = json.loads(proc.stdout).get("error")
        problems = []
        if out["sync"]["traceback"]:
            problems.append("the sync printed a traceback")
        if proc.returncode != 0 and (out["sync"].get("error") or {}).get("code") != "disk_full":
            problems.append(f"the sync failed without the disk_full error: {out['sync']}")
        problems += [f"while full, {p}" for p in check_cli_answers(env, checker, quick)]
        filler.unlink()
        problems += [f"after freeing space, {p}" for p in converge(lab, checker, env)]
        out["problems"] = problems
        return out
    finally:
        sh("umount", "-l", str(mount))


def read_only(lab: Lab, checker: Checker, quick: bool) -> dict[str, Any]:
    """Sync and ingest against a read-only bind mount of an index an earlier version wrote; then writable again."""
    import lance

    db = lab.work / "ro-index"
    shutil.copytree(lab.ref_copy, db)
    lance.dataset(str(db / "chunks.lance")).drop_columns(["lang"])  # what the field's first open adds
    forget(checker, db, lab, 3)
    env = with_db(lab, db)
    sh("mount", "--bind", str(db), str(db))
    problems = []
    out: dict[str, Any] = {}
    try:
        sh("mount", "-o", "remount,bind,ro", str(db))
        for name, args in (("sync", ["sync"]), ("ingest", ["ingest", str(lab.files[0])])):
            proc, _ = run(args, env)
            out[name] = named_failure(proc)
            if proc.returncode == 0 or out[name]["traceback"] or "read-only" not in out[name]["said"]:
                problems.append(f"{name} on a read-only index: {out[name]}")
        problems += [f"read-only, {p}" for p in check_cli_answers(env, checker, quick)]
    finally:
        sh("umount", "-l", str(db))
    problems += [f"writable again, {p}" for p in converge(lab, checker, env)]
    out["problems"] = problems
    return out


class McpClient:
    """`minirag serve` over stdio, line-delimited JSON-RPC."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(minirag_cmd("serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        self.next_id += 1
        assert self.proc.stdin and self.proc.stdout
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server closed stdout (exit {self.proc.poll()}) during {method}")
            frame = json.loads(line)
            if frame.get("id") == self.next_id:
                return frame
        raise TimeoutError(method)

    def notify(self, method: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def close(self) -> int | None:
        """End of input ends the server; one that outlives 15 s more is killed and counted as hung."""
        assert self.proc.stdin
        self.proc.stdin.close()
        self.hung = wait_gone([self.proc.pid], 15.0) != []
        return self.proc.wait()


def mcp_round(lab: Lab, env: dict[str, str]) -> dict[str, Any]:
    """initialize, a query and status on the damaged index, `sync --clean` beside it, the query again."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    client = McpClient(env)
    out: dict[str, Any] = {}
    problems = []
    try:
        init = client.request("initialize", {"protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1], "capabilities": {},
                                             "clientInfo": {"name": "faults", "version": "0"}})
        out["initialize"] = "result" in init
        client.notify("notifications/initialized")
        first = client.tool("query_documents", {"query": QUERIES[0], "topK": 3})
        out["query"] = (first.get("structuredContent") or {}).get("error") if first.get("isError") else "answered"
        if first.get("isError") and not (out["query"] or {}).get("code"):
            problems.append(f"the query failed without a named error: {first}")
        if isinstance(out["query"], dict) and out["query"].get("code") == "internal_error":
            problems.append(f"the query failed with internal_error instead of naming the problem: {out['query']}")
        status = client.tool("status", {})
        out["status"] = (status.get("structuredContent") or {}).get("index", {}).get("chunkCount", "error")
        proc, _ = run(["sync", "--clean", "--json"], env)
        if proc.returncode != 0:
            problems.append(f"sync --clean beside the server exited {proc.returncode}: {named_failure(proc)}")
        again = client.tool("query_documents", {"query": QUERIES[0], "topK": 3})
        out["queryAfterClean"] = "answered" if not again.get("isError") else again.get("structuredContent")
        hits = (again.get("structuredContent") or {}).get("results") or []
        if again.get("isError") or not hits:
            problems.append(f"after sync --clean the running server did not answer: {str(again)[:400]}")
    except (RuntimeError, TimeoutError, ValueError) as exc:
        problems.append(f"the MCP server broke: {exc}")
    alive = client.proc.poll() is None
    out["aliveAtEnd"] = alive
    if not alive:
        problems.append(f"the MCP server exited ({client.proc.returncode})")
    client.close()
    if client.hung:
        problems.append("the MCP server did not exit within 15 s of its input closing")
    out["problems"] = problems
    return out


def query_outcome(env: dict[str, str], checker: Checker, quick: bool) -> tuple[Any, list[str]]:
    """A query on a damaged index: "answered", or the named error it failed with."""
    from appliance.errors import ApplianceError

    if quick:
        try:
            checker.fresh(Path(env["DB_PATH"])).search(QUERIES[0], top_k=3)
            return "answered", []
        except ApplianceError as exc:
            return exc.to_dict(), []
        except Exception as exc:  # noqa: BLE001
            return repr(exc), [f"query raised {type(exc).__name__} instead of a named error: {exc}"]
    proc, _ = run(["query", QUERIES[0], "--top-k", "3"], env)
    said = "answered" if proc.returncode == 0 else named_failure(proc)
    if proc.returncode != 0 and (said["traceback"] or "hint:" not in said["said"]):
        return said, [f"query failed without a named error: {said}"]
    return said, []


def damaged(lab: Lab, checker: Checker, kind: str, with_mcp: bool, quick: bool) -> dict[str, Any]:
    db = lab.work / f"damaged-{kind}"
    shutil.copytree(lab.ref_copy, db)
    KINDS[kind](db)
    env = with_db(lab, db)
    out: dict[str, Any] = {"kind": kind}
    problems = []
    proc, _ = run(["status"], env)
    try:
        status = json.loads(proc.stdout)
        index = status.get("index") or {}
        said = status.get("indexError") or {k: v for k, v in index.items() if k.endswith("Warning")} or None
    except ValueError:
        status, said = {}, None
    out["status"] = said or "nothing wrong reported"
    if proc.returncode != 0 or "Traceback" in proc.stderr or not status:
        problems.append(f"status did not answer: rc {proc.returncode} {proc.stderr[-400:]}")
    elif said and "minirag sync" not in json.dumps(said):
        problems.append(f"status names no recovery command: {said}")
    if with_mcp:
        out["mcp"] = mcp_round(lab, env)
        problems += [f"mcp: {p}" for p in out["mcp"].pop("problems")]
        problems += [f"after the server's clean sync, {p}" for p in checker.differences(lab.reference, db=db)]
        out["recoveredBy"] = "sync --clean beside the running server"
        return out | {"problems": problems}
    out["query"], found = query_outcome(env, checker, quick)
    problems += found
    if quick and isinstance(said, dict) and said.get("code") == "index_corrupt":
        out["recoveredBy"] = "sync --clean"
        return out | {"problems": problems + converge(lab, checker, env, ("sync", "--clean", "--json"))}
    proc, _ = run(["sync", "--json"], env)
    out["sync"] = "converged" if proc.returncode == 0 else named_failure(proc)
    if proc.returncode != 0 and out["sync"]["traceback"]:
        problems.append(f"sync printed a traceback: {out['sync']}")
    differences = checker.differences(lab.reference, db=db) if proc.returncode == 0 else ["sync failed"]
    out["recoveredBy"] = "sync" if not differences else "sync --clean"
    if differences:
        problems += converge(lab, checker, env, ("sync", "--clean", "--json"))
    out["problems"] = problems
    return out


def storage_faults(lab: Lab, free_kb: list[int], kinds: list[str], mcp_kinds: list[str], quick: bool = False,
                   log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every scenario on one lab; its index must equal its reference when this starts."""
    checker = Checker(lab.env)
    lab.ref_copy = lab.work / "index.ref"
    shutil.copytree(lab.db, lab.ref_copy)
    results: dict[str, Any] = {"diskFull": [], "readOnly": None, "damaged": []}
    for kb in free_kb:
        results["diskFull"].append(disk_full(lab, checker, kb, quick))
        log and log(f"disk full ({kb} KB free): {results['diskFull'][-1]}")
    results["readOnly"] = read_only(lab, checker, quick)
    log and log(f"read-only: {results['readOnly']}")
    for kind in kinds:
        results["damaged"].append(damaged(lab, checker, kind, kind in mcp_kinds, quick))
        log and log(f"damaged ({kind}): {results['damaged'][-1]}")
    failures = [p for r in results["diskFull"] + [results["readOnly"]] + results["damaged"] for p in r["problems"]]
    return results | {"failures": failures, "scenarios": len(free_kb) + 1 + len(kinds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--model", choices=("real", "tiny"), default="real")
    parser.add_argument("--free-kb", default="0,64,1024", help="free space left on the small filesystem, per run")
    parser.add_argument("--damage", default="all", help="damage kinds: all or a comma list of " + ", ".join(KINDS))
    parser.add_argument("--mcp", default="truncate-chunks-data,garbage-chunks-manifest,delete-identity",
                        help="damage kinds checked through `minirag serve` (all, none or a list)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="fewer process starts (CI): status checks in-process, no plain sync on a corrupt table")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    private_mounts()
    kinds = list(KINDS) if args.damage == "all" else [k for k in args.damage.split(",") if k]
    mcp = list(KINDS) if args.mcp == "all" else [] if args.mcp == "none" else args.mcp.split(",")
    unknown = set(kinds + mcp) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown damage kinds: {sorted(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="minirag-faults-storage-"))

    def log(line: str) -> None:
        print(line[:1500], file=sys.stderr, flush=True)

    try:
        started = time.monotonic()
        lab = make_lab(work, args.files, args.model, seed=args.seed)
        result = storage_faults(lab, [int(x) for x in args.free_kb.split(",") if x], kinds, mcp, args.quick, log=log)
        result |= {"model": args.model, "files": len(lab.files), "seconds": round(time.monotonic() - started, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    else:
        for r in result["diskFull"]:
            print(f"disk full, {r['freeKb']} KB free: sync rc {r['sync']['rc']} {r['sync']['said'][:160]}; "
                  f"{'OK' if not r['problems'] else 'FAIL ' + '; '.join(r['problems'])}")
        r = result["readOnly"]
        print(f"read-only: sync {r.get('sync', {}).get('said', '')[:120]}; "
              f"{'OK' if not r['problems'] else 'FAIL ' + '; '.join(r['problems'])}")
        for r in result["damaged"]:
            query = str(r.get('query', r.get('mcp', {}).get('query')))[:100]
            print(f"damaged {r['kind']}: status says {json.dumps(r['status'])[:200]}; query {query}; "
                  f"recovered by {r['recoveredBy']}; "
                  f"{'OK' if not r['problems'] else 'FAIL ' + '; '.join(r['problems'])}")
        print(f"{result['scenarios']} scenarios, {len(result['failures'])} problems, {result['seconds']} s")
    sys.exit(0 if not result["failures"] else 1)


if __name__ == "__main__":
    main()
