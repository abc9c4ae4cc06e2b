#!/bin/sh
# usage: strip-libs.sh SITE_PACKAGES
#
# Strips symbol tables from the virtualenv's shared libraries (about 45 MB). Some
# wheels' libraries were rewritten by patchelf and break when stripped ("ELF load
# command address/offset not page-aligned"), so each stripped file must still load
# (dlopen, in place so $ORIGIN paths resolve); a file that does not is put back as it was.
set -eu
command -v strip >/dev/null || { echo "strip-libs: no strip here; libraries left as they are"; exit 0; }
kept=0
for lib in $(find "$1" -name '*.so*' -type f); do
    cp -p "$lib" "$lib.orig"
    if strip --strip-unneeded "$lib" 2>/dev/null \
        && python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$lib" 2>/dev/null; then
        rm "$lib.orig"
    else
        mv "$lib.orig" "$lib"
        kept=$((kept + 1))
    fi
done
echo "strip-libs: $kept libraries kept unstripped (they do not load stripped, or do not load alone)"
