#!/usr/bin/env bash
# Installs everything flexpoint needs on a fresh Debian machine (idempotent). Run as root, or
# with sudo available. Set FLEXPOINT_SKIP_SETUP=1 to skip (e.g. when already provisioned).
set -euo pipefail
if [ "${FLEXPOINT_SKIP_SETUP:-0}" = "1" ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
# clang and libclang-rt-14-dev: libFuzzer for tools/fuzz_check.sh; fortunes: the text corpus of
# --data fortunes (docs/training.md); openmpi-bin and
# libopenmpi-dev: data-parallel training (docs/distributed.md) and its test
PKGS="build-essential cmake pkg-config zlib1g-dev dataset-fashion-mnist fortunes python3 python3-pip doxygen clang libclang-rt-14-dev openmpi-bin libopenmpi-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi
# Python packages for the binding's tests and the plotting scripts.
PY=python3
if ! $PY -c "import numpy, matplotlib, ml_dtypes, pytest" 2>/dev/null; then
  $PY -m pip install -q numpy matplotlib ml_dtypes pytest 2>/dev/null ||
    $PY -m pip install -q --break-system-packages numpy matplotlib ml_dtypes pytest
fi
