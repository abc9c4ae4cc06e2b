#!/usr/bin/env bash
# usage: scripts/make_base_image.sh [TAG]   (default TAG: local/base:bookworm)
#
# Make a local Debian bookworm base image with debootstrap, for machines where no
# container registry is reachable (so python:3.11-slim cannot be pulled). The image
# has Python 3.11 + venv, CA certificates and the tesseract OCR engine with the
# English, German and Russian languages, so the Dockerfile needs no apt at build time.
# The root filesystem tarball is cached in .cache/ (about 100 s to make, 2 s to reuse).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-local/base:bookworm}"
CACHE=".cache/base-bookworm.tar.gz"
PACKAGES="python3,python3-venv,ca-certificates,tesseract-ocr,tesseract-ocr-eng,tesseract-ocr-deu,tesseract-ocr-rus"
DOCKER="${DOCKER:-/usr/bin/docker}"

if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
    echo "base image $TAG exists"
    exit 0
fi
if [[ ! -s "$CACHE" ]]; then
    # The Debian mirror this host already uses (apt sources), else the public one.
    MIRROR="$(grep -hoE '^URIs: *http[^ ]*/debian$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | sed 's/^URIs: *//')"
    MIRROR="${MIRROR:-$(grep -hoE '^deb +http[^ ]*/debian ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')}"
    MIRROR="${MIRROR:-http://deb.debian.org/debian}"
    ROOTFS="$(mktemp -d /tmp/minirag-rootfs.XXXXXX)"
    # debootstrap mounts /proc and /sys inside the rootfs while it works: unmount
    # anything left there before deleting, and never cross into another filesystem.
    cleanup() { grep -o " $ROOTFS/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l; rm -rf --one-file-system "$ROOTFS"; }
    trap cleanup EXIT
    echo "debootstrap bookworm from $MIRROR (about 100 s)"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS" "$MIRROR" >/dev/null
    # apt caches and lists are not needed in the image.
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    mkdir -p .cache
    tar -C "$ROOTFS" --numeric-owner --one-file-system -czf "$CACHE.tmp" .
    mv "$CACHE.tmp" "$CACHE"
fi
echo "importing $CACHE as $TAG"
"$DOCKER" import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' "$CACHE" "$TAG" >/dev/null
