#!/usr/bin/env bash
# Create .venv with ksbuild (editable) and what its tests need. torch is pinned to the CPU
# build (an unpinned torch would pull several GB of CUDA packages). The "blas" backend needs a
# CBLAS library: OpenBLAS from apt when it is missing (Debian/Ubuntu, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ldconfig -p | grep -q "libopenblas\.so\|libblas\.so "; then
    if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
        echo "install.sh: installing libopenblas-dev (for backend = \"blas\")"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev > /dev/null
    else
        echo "install.sh: WARNING: no BLAS found; install libopenblas-dev for backend = \"blas\" and its tests" >&2
    fi
fi
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test,torch,plot,examples]"
