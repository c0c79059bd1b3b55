#!/usr/bin/env bash
# Create .venv with ksbuild (editable) and what its tests need. torch is pinned to the CPU
# build (an unpinned torch would pull several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test,torch,plot]"
