#!/usr/bin/env bash
# Create .venv-executorch: ExecuTorch with its XNNPACK delegate, for the ExecuTorch column of
# benchmarks/models/bench.py (which runs it in a subprocess with this venv's python). A venv of its
# own because executorch pulls many packages (torchao, coremltools, pandas, ...) that ksbuild's
# .venv does not need; torch stays pinned to the CPU build (benchmarks/models/requirements-executorch.txt),
# an unpinned torch would pull several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-executorch
.venv-executorch/bin/pip install --quiet --upgrade pip
.venv-executorch/bin/pip install --quiet -r benchmarks/models/requirements-executorch.txt
.venv-executorch/bin/python -c "import executorch, torch; print('install_executorch.sh: torch', torch.__version__)"
