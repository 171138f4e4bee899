#!/usr/bin/env bash
# Installs the Debian packages Loom needs (skipped when they are all present).
set -euo pipefail
packages=(
  g++ clang cmake make pkg-config ccache
  libopenblas-pthread-dev liblapacke-dev libdnnl-dev libopenmpi-dev openmpi-bin
  libgtest-dev libbenchmark-dev nlohmann-json3-dev zlib1g-dev libcli11-dev
  dataset-fashion-mnist fortunes fortunes-min gnuplot-nox
  python3-numpy python3-torch
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >&2
fi
