#!/usr/bin/env bash
# usage: scripts/make_base_image.sh [TAG]   (default TAG: local/base:bookworm-3)
#
# Make a local Debian bookworm base image with debootstrap, for machines where no
# container registry is reachable (so python:3.11-slim cannot be pulled). The image
# has Python 3.11 + venv, CA certificates, the tesseract OCR engine with the English,
# German and Russian languages and jemalloc (the allocator the image's processes preload),
# so the Dockerfile needs no apt at build time.
# A second image, TAG-build, is the same plus binutils: the Dockerfile's build stage
# strips the virtualenv's shared libraries with it (about 45 MB), the runtime has none.
# Both root filesystem tarballs are cached in .cache/ (about 2 min to make, seconds to reuse).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-local/base:bookworm-3}"
CACHE=".cache/base-bookworm-3.tar.gz"  # -2: without docs, manuals, translations; -3: with jemalloc
BUILD_CACHE=".cache/base-bookworm-3-build.tar.gz"
PACKAGES="python3,python3-venv,ca-certificates,tesseract-ocr,tesseract-ocr-eng,tesseract-ocr-deu,tesseract-ocr-rus,libjemalloc2"
DOCKER="${DOCKER:-/usr/bin/docker}"

if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1 && "$DOCKER" image inspect "$TAG-build" >/dev/null 2>&1; then
    echo "base images $TAG and $TAG-build exist"
    exit 0
fi
if [[ ! -s "$CACHE" || ! -s "$BUILD_CACHE" ]]; then
    # The Debian mirror this host already uses (apt sources), else the public one.
    MIRROR="$(grep -hoE '^URIs: *http[^ ]*/debian$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | sed 's/^URIs: *//')"
    MIRROR="${MIRROR:-$(grep -hoE '^deb +http[^ ]*/debian ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')}"
    MIRROR="${MIRROR:-http://deb.debian.org/debian}"
    ROOTFS="$(mktemp -d /tmp/minirag-rootfs.XXXXXX)"
    # debootstrap mounts /proc and /sys inside the rootfs while it works: unmount
    # anything left there before deleting, and never cross into another filesystem.
    cleanup() {
        { grep -o " $ROOTFS/[^ ]*" /proc/mounts || true; } | sort -r | xargs -r -n1 umount -l
        rm -rf --one-file-system "$ROOTFS"
    }
    trap cleanup EXIT
    echo "debootstrap bookworm from $MIRROR (about 100 s)"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS" "$MIRROR" >/dev/null
    prune() {  # apt caches and lists, documentation, manual pages and translations: not needed in an image
        rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/lib/apt/lists/* \
            "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* "$ROOTFS"/usr/share/info/*
    }
    prune
    mkdir -p .cache
    tar -C "$ROOTFS" --numeric-owner --one-file-system -czf "$CACHE.tmp" .
    mv "$CACHE.tmp" "$CACHE"
    echo "adding binutils for the build image"
    cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
    chroot "$ROOTFS" /bin/sh -c 'apt-get -o APT::Sandbox::User=root update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y -qq --no-install-recommends binutils' >/dev/null
    prune
    tar -C "$ROOTFS" --numeric-owner --one-file-system -czf "$BUILD_CACHE.tmp" .
    mv "$BUILD_CACHE.tmp" "$BUILD_CACHE"
fi
echo "importing $CACHE as $TAG and $BUILD_CACHE as $TAG-build"
"$DOCKER" import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' "$CACHE" "$TAG" >/dev/null
"$DOCKER" import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' "$BUILD_CACHE" "$TAG-build" >/dev/null
