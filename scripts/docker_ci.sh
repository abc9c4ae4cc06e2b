#!/usr/bin/env bash
# usage: scripts/docker_ci.sh [COMMAND ARGS...]   (as root; .ci/run calls it with `make test-all`)
#
# Runs COMMAND with a Docker engine: starts dockerd if none is running (and stops it again
# at the end). Without COMMAND, the container image's CI alone: make the image (debootstrap
# base cached in .cache/, wheelhouse, baked models, docker build), then run the image tests
# (tests/docker, marker `docker`).
set -euo pipefail
cd "$(dirname "$0")/.."
export DOCKER="${DOCKER:-/usr/bin/docker}"   # Debian's CLI: talks BuildKit to the daemon
export MINIRAG_DOCKER=1
started_pid=""
t0=$SECONDS

if ! "$DOCKER" info >/dev/null 2>&1; then
    command -v dockerd >/dev/null && command -v debootstrap >/dev/null || {
        echo "== installing docker.io and debootstrap"
        apt-get install -y -qq docker.io debootstrap >/dev/null; }
    echo "== starting dockerd"
    dockerd >/tmp/minirag-ci-dockerd.log 2>&1 &
    started_pid=$!
    for _ in $(seq 1 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 1; done
    "$DOCKER" info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/minirag-ci-dockerd.log" >&2; exit 1; }
fi
stop_dockerd() {
    if [[ -n "$started_pid" ]]; then
        echo "== stopping dockerd (pid $started_pid)"
        kill "$started_pid" 2>/dev/null || true
        wait "$started_pid" 2>/dev/null || true
    fi
}
trap stop_dockerd EXIT

if [[ $# -gt 0 ]]; then
    echo "== $* (Docker engine up)"
    "$@"
    exit
fi
echo "== make image"
make image DOCKER="$DOCKER"
echo "   image ready after $((SECONDS - t0)) s"
echo "== image tests"
.venv/bin/python -m pytest -m docker tests/docker -v -p no:cacheprovider --durations=0
echo "== docker CI done in $((SECONDS - t0)) s"
