#!/usr/bin/env bash
# The one check to run on a lent GPU machine (bounded to about 6 minutes): the GPU tests on cupy and
# the GPU tier benchmark on cupy. That machine reaches no package index: it uses its own python3,
# which has cupy, numpy, pyarrow, pytest, tqdm and xxhash (/work/.library/device/KINDS.md). It has no
# Java, so the Spark-fed GPU test (tests/test_gpu_exchange.py) runs in CI on the simulated device only.
# The driver tiers read their conf defaults from the jar (memphis.jar_facts): carry python/memphis/jars.
# Results: benchmarks/results/gpu_tier_cupy{,_batch1024}.{json,md} and, when $OUT is set, copies under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH=python PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c 'import cupy, numpy, pyarrow; print("cupy", cupy.__version__, "numpy", numpy.__version__, "pyarrow", pyarrow.__version__)'
timeout 180 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_gpu_tier.py 2>&1 | tee "${OUT:-/tmp}/gpu_pytest.txt"
timeout 150 "$PY" benchmarks/gpu_tier.py --device cupy 2>&1 | tail -30
timeout 120 "$PY" benchmarks/gpu_tier.py --device cupy --batch 1024 2>&1 | tail -20
if [ -n "${OUT:-}" ]; then cp benchmarks/results/gpu_tier_cupy* "$OUT/"; fi
