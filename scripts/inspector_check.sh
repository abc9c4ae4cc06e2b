#!/usr/bin/env bash
# Usage: scripts/inspector_check.sh [DOCS_DIR]
#
# Drives `minirag serve` with the official MCP Inspector CLI (npx @modelcontextprotocol/inspector --cli):
# tools/list, tools/call status, tools/call query_documents. Without DOCS_DIR it writes a two-file
# sample folder; either way the folder is indexed first (`minirag sync`) into a throwaway DB_PATH.
# Needs node/npx and the npm registry (or a warm npx cache). Exits non-zero on the first failure.
# Environment: MINIRAG (default .venv/bin/minirag), INSPECTOR (default @modelcontextprotocol/inspector).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
minirag="${MINIRAG:-$here/.venv/bin/minirag}"
python="$(dirname "$minirag")/python"
inspector="${INSPECTOR:-@modelcontextprotocol/inspector}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

docs="${1:-}"
if [[ -z "$docs" ]]; then
  docs="$work/docs"
  mkdir -p "$docs"
  printf '# Error catalogue\n\nThe code ERR_ZORBLATT_7741 means the flux controller overheated.\n' >"$docs/errors.md"
  printf 'Зимой в Новосибирске морозы достигают минус сорока градусов.\n' >"$docs/pogoda.txt"
fi
docs="$(cd "$docs" && pwd)"
export BASE_DIR="$docs" DB_PATH="$work/db"
unset BASE_DIRS MODEL_NAME

fail() { echo "inspector_check: FAIL: $*" >&2; exit 1; }

echo "== index $docs" >&2
"$minirag" sync --json >"$work/sync.json" || fail "minirag sync exited $?"

inspect() {  # inspect <out-file> <inspector args...>
  local out="$1"; shift
  timeout 300 npx -y "$inspector" --cli -e "BASE_DIR=$BASE_DIR" -e "DB_PATH=$DB_PATH" \
    "$minirag" serve "$@" >"$out" || fail "inspector $* exited $?"
}

check() {  # check <json-file> <python expression over `d`>
  "$python" - "$1" "$2" <<'EOF' || fail "$2 (in $(basename "$1"))"
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"d": d})
sys.exit(0 if ok else 1)
EOF
}

echo "== tools/list" >&2
inspect "$work/list.json" --method tools/list
check "$work/list.json" 'len(d["tools"]) == 14 and {"query_documents", "status", "grep", "list_roots"} <= {t["name"] for t in d["tools"]}'
check "$work/list.json" 'all(t.get("outputSchema", {}).get("type") == "object" for t in d["tools"])'

echo "== tools/call status" >&2
inspect "$work/status.json" --method tools/call --tool-name status
check "$work/status.json" 'not d.get("isError") and d["structuredContent"]["index"]["sourceCount"] >= 1'

echo "== tools/call query_documents" >&2
inspect "$work/query.json" --method tools/call --tool-name query_documents --tool-arg query=ERR_ZORBLATT_7741 --tool-arg topK=3
check "$work/query.json" 'not d.get("isError") and len(d["structuredContent"]["results"]) >= 1'
if [[ -z "${1:-}" ]]; then
  check "$work/query.json" 'd["structuredContent"]["results"][0]["displayPath"] == "errors.md"'
fi

echo "== tools/call query_documents topK=0 (a structured error)" >&2
inspect "$work/bad.json" --method tools/call --tool-name query_documents --tool-arg query=x --tool-arg topK=0
check "$work/bad.json" 'd.get("isError") is True and d["structuredContent"]["error"]["code"] == "invalid_argument"'

echo "inspector_check: OK" >&2
