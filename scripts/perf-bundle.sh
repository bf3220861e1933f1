#!/usr/bin/env bash
# Puts this machine's `perf` and the shared libraries it links into a folder ($1, default
# gpu-bin/perf), for the GPU machine, which has no perf: perf/perf and perf/lib/. The C
# and C++ runtimes (libc, libm, libstdc++, libgcc_s, the loader) are left out: the GPU
# machine's are newer and take their place. scripts/perf-rank.sh runs the carried perf
# with only these libraries on its own search path (the loader's --library-path), so the
# program it profiles loads its own. With PERF_PACK=1 the folder is packed into
# <folder>.tar.xz instead (about 7 MB against 28: the carry to the GPU machine is limited),
# to be unpacked there, e.g. `tar xJf gpu-bin/perf.tar.xz -C /tmp` and
# PERF_BIN=/tmp/perf/perf.
set -euo pipefail
dest="${1:-$(dirname "$0")/../gpu-bin/perf}"
perf="$(readlink -f "$(command -v perf)")"
rm -rf "$dest" && mkdir -p "$dest/lib"
cp "$perf" "$dest/perf"
ldd "$perf" | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$dest/lib/"; done
echo "perf $("$perf" --version | awk '{print $3}') and $(ls "$dest/lib" | wc -l) libraries in $dest ($(du -sh "$dest" | cut -f1))"
if [[ ${PERF_PACK:-0} == 1 ]]; then
  tar cJf "$dest.tar.xz" -C "$(dirname "$dest")" "$(basename "$dest")" && rm -rf "$dest"
  echo "packed into $dest.tar.xz ($(du -sh "$dest.tar.xz" | cut -f1))"
fi
