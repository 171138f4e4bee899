#!/usr/bin/env bash
# Installs the built Loom into a scratch prefix, then builds and runs a consumer with find_package and
# with pkg-config.
set -euo pipefail
# $4: the glibc-hwcaps levels the build made copies of the library for ("x86-64-v3;x86-64-v4", or
# empty): each must be installed, and the consumer must run on each.
build="$1"; src="$2"; work="$3"; levels="${4:-}"
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# Only the public API is installed: no kernel toolkit or layer-private header.
for internal in core/loops.h core/copy.h core/fusion.h ops/utils.h kernels/gemm.h kernels/elementwise.h io/detail.h distributed/detail; do
  [ ! -e "$work/prefix/include/loom/$internal" ] || { echo "internal header $internal was installed"; exit 1; }
done
[ -e "$work/prefix/include/loom/loom.h" ] && [ -e "$work/prefix/include/loom/fast/fast.h" ] && [ -e "$work/prefix/include/loom/kernels/backend.h" ] ||
  { echo "public headers are missing from the install"; exit 1; }
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="${LOOM_SANITIZE_FLAGS:-}" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}"
out=$("$work/cmake-build/consumer" | head -1)
[ "$out" = "6" ] || { echo "find_package consumer printed '$out', expected 6"; exit 1; }
# Every copy of the library is installed where the loader looks (lib/glibc-hwcaps/<level>/), nothing
# installed is compiled for the build machine only, and the consumer gets each copy when the CPU
# features that select the higher ones are hidden from the loader.
for level in ${levels//;/ }; do
  [ -e "$work/prefix/lib/glibc-hwcaps/$level/libloom.so.0" ] || { echo "the $level copy of libloom is not installed"; exit 1; }
done
if [ -n "$levels" ]; then
  for want in "x86-64:-AVX2" "x86-64-v3:-AVX512F"; do
    isa="${want%%:*}"
    /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q "$isa (supported" || [ "$isa" = "x86-64" ] || continue
    got=$(GLIBC_TUNABLES="glibc.cpu.hwcaps=${want#*:}" "$work/cmake-build/consumer" | tail -1)
    [ "$got" = "$isa" ] || { echo "with ${want#*:} hidden the consumer loaded the '$got' copy, expected $isa"; exit 1; }
  done
fi
[ "$("$work/cmake-build/consumer" | tail -1)" != "native" ] || [ -z "$levels" ] ||
  { echo "the installed library was compiled with -march=native"; exit 1; }
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
flags=()
[ -n "${LOOM_SANITIZE_FLAGS:-}" ] && flags=($LOOM_SANITIZE_FLAGS)
g++ "${flags[@]}" "$src/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs loom)
out=$("$work/consumer-pc" | head -1)
[ "$out" = "6" ] || { echo "pkg-config consumer printed '$out', expected 6"; exit 1; }
echo "install test: find_package and pkg-config consumers both print 6"
