#!/usr/bin/env bash
# The one check to run on a lent GPU machine (bounded to about 8 minutes): a venv with the pinned
# dev requirements and cupy, the GPU tests, and the GPU tier benchmark on cupy.
# Results: benchmarks/results/gpu_tier_cupy.{json,md} and, when $OUT is set, copies under $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/tmp/memphis-gpu-venv}
python3 -m venv "$VENV"
timeout 180 "$VENV/bin/pip" install -q -r requirements-dev.txt "cupy-cuda12x>=13"
export PYTHONPATH=python
timeout 120 "$VENV/bin/python" -m pytest -q -m gpu tests/test_gpu_tier.py 2>&1 | tee "${OUT:-/tmp}/gpu_pytest.txt"
timeout 180 "$VENV/bin/python" benchmarks/gpu_tier.py --device cupy 2>&1 | tail -20
if [ -n "${OUT:-}" ]; then cp benchmarks/results/gpu_tier_cupy.* "$OUT/"; fi
