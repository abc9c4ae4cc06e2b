#!/usr/bin/env python
"""Usage: scripts/mcp_snapshot.py [--check]

Records what the real fastmcp server answers to `initialize` for every handshake
protocol revision the installed SDK serves, and to the listings a client asks for
right after it (`tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`), into
appliance/mcp_snapshot.json: the stdio front (appliance/stdio_front.py) replays
those answers while fastmcp is still being imported. The instructions are left
out (the front builds them from the settings, as the server does).

--check compares a fresh recording with the file and exits 1 when they differ:
after changing a tool, its schema or a dependency, run this script without
--check and commit the file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mcp import Stdio  # noqa: E402

SNAPSHOT = Path(__file__).resolve().parent.parent / "appliance" / "mcp_snapshot.json"
LISTINGS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")


def record() -> dict[str, Any]:
    """The live server's answers, one fresh process per revision, with the front switched off."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    handshake: dict[str, Any] = {}
    listings: list[dict[str, Any]] = []  # {method: answer} per revision
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIR", "BASE_DIRS", "MCP_INSTRUCTIONS_EXTRA")}
        env |= {"MCP_FAST_HANDSHAKE": "0", "BASE_DIR": tmp, "DB_PATH": str(Path(tmp) / "db")}
        for version in HANDSHAKE_PROTOCOL_VERSIONS:
            server = Stdio(env)
            init = server.request("initialize", {"protocolVersion": version, "capabilities": {},
                                                 "clientInfo": {"name": "snapshot", "version": "0"}})
            server.notify("notifications/initialized")
            listing = {method: server.request(method, {}) for method in LISTINGS}
            server.close()
            init.pop("instructions", None)
            handshake[version] = init
            listings.append(listing)
    if any(listing != listings[0] for listing in listings):
        raise SystemExit("a listing differs between protocol revisions: the front replays one; extend it")
    return {"about": "recorded by scripts/mcp_snapshot.py; replayed by appliance/stdio_front.py",
            "initialize": handshake, **listings[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = parser.parse_args()
    fresh = record()
    if args.check:
        committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        if committed != fresh:
            stale = [k for k in fresh if committed.get(k) != fresh[k]]
            print(f"{SNAPSHOT.name} is stale ({', '.join(stale)} differ): run scripts/mcp_snapshot.py")
            return 1
        print(f"{SNAPSHOT.name} matches the live server for {len(fresh['initialize'])} revisions")
        return 0
    SNAPSHOT.write_text(json.dumps(fresh, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT} ({len(fresh['initialize'])} revisions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
