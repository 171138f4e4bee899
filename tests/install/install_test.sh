#!/usr/bin/env bash
# Installs the built Loom into a scratch prefix, then builds and runs a consumer with find_package and
# with pkg-config.
set -euo pipefail
build="$1"; src="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# Only the public API is installed: no kernel toolkit or layer-private header.
for internal in core/loops.h core/copy.h core/fusion.h ops/utils.h ops/kernels io/detail.h distributed/detail; do
  [ ! -e "$work/prefix/include/loom/$internal" ] || { echo "internal header $internal was installed"; exit 1; }
done
[ -e "$work/prefix/include/loom/loom.h" ] && [ -e "$work/prefix/include/loom/fast/fast.h" ] ||
  { echo "public headers are missing from the install"; exit 1; }
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="${LOOM_SANITIZE_FLAGS:-}" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}"
out=$("$work/cmake-build/consumer")
[ "$out" = "6" ] || { echo "find_package consumer printed '$out', expected 6"; exit 1; }
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
flags=()
[ -n "${LOOM_SANITIZE_FLAGS:-}" ] && flags=($LOOM_SANITIZE_FLAGS)
g++ "${flags[@]}" "$src/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs loom)
out=$("$work/consumer-pc")
[ "$out" = "6" ] || { echo "pkg-config consumer printed '$out', expected 6"; exit 1; }
echo "install test: find_package and pkg-config consumers both print 6"
