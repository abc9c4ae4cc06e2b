#!/usr/bin/env bash
# usage: scripts/image_bundle.sh save|load IMAGE BUNDLE
#   save: BUNDLE = `docker save IMAGE | gzip`, plus BUNDLE.sha256 and LOAD.txt next to it
#   load: check BUNDLE against BUNDLE.sha256, then `docker load`
# The air-gap path: copy the three files to the target host, then follow LOAD.txt.
set -euo pipefail
DOCKER="${DOCKER:-docker}"
[[ $# -eq 3 ]] || { sed -n '2,5p' "$0" >&2; exit 2; }
action="$1" image="$2" bundle="$3"
dir="$(dirname "$bundle")" name="$(basename "$bundle")"
case "$action" in
save)
    mkdir -p "$dir"
    "$DOCKER" save "$image" | gzip -1 > "$bundle.tmp"
    mv "$bundle.tmp" "$bundle"
    (cd "$dir" && sha256sum "$name" > "$name.sha256")
    cat > "$dir/LOAD.txt" <<TXT
minirag appliance image $image
Saved $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo "an unknown revision").

On the target host (no network needed):
  sha256sum -c $name.sha256          # must print: $name: OK
  gunzip -c $name | docker load      # prints: Loaded image: $image
  docker run --rm --pull never $image status

Then, for example:
  docker run --rm --pull never --network none -v /path/to/docs:/docs:ro -v minirag-index:/index $image sync
  docker run --rm -i --pull never --network none -v /path/to/docs:/docs:ro -v minirag-index:/index $image
TXT
    echo "saved $bundle ($(du -h "$bundle" | cut -f1)), $bundle.sha256, $dir/LOAD.txt"
    ;;
load)
    (cd "$dir" && sha256sum -c --quiet "$name.sha256")
    gunzip -c "$bundle" | "$DOCKER" load
    ;;
*) sed -n '2,5p' "$0" >&2; exit 2 ;;
esac
