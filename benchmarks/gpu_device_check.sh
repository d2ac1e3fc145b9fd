#!/usr/bin/env bash
# The one check to run on a lent GPU machine, about 5 minutes (each step capped; all caps add up to
# 8 minutes): the GPU tier benchmark on cupy (its batches of 32, with the Arrow transfers; then
# batches of 1024), the per-operation tracing overhead on cupy, and the GPU tests on cupy; then the
# verdict on issue 22's GPU target: memphis (cupy's MemoryPool with memphis' budget as its base
# allocator) against plain cupy with its default pool, at least equal with 0 % repeated batches
# and faster with 80 % (a target not met is reported, it does not fail the check).
# That machine reaches no package index: it uses its own python3, which has cupy, numpy, pyarrow,
# pytest, tqdm and xxhash (/work/.library/device/KINDS.md), and no Java, pyspark or cudf: memphis
# imports without pyspark (checked below), and the Spark-fed GPU test (tests/test_gpu_exchange.py)
# runs in CI on the simulated device only. The driver tiers read their conf defaults from the jar
# (memphis.jar_facts), which git ignores: carry python/memphis/jars.
# Results, under $OUT (default /tmp/gpu_device_check): gpu_tier_cupy{,_batch1024}.{json,md},
# tracing_overhead_cupy.{json,md}, and each step's log.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu_device_check}
mkdir -p "$OUT"
export PYTHONPATH=python PYTHONUNBUFFERED=1
status=0
step() {  # step SECONDS NAME COMMAND...: runs it under a cap, its log in $OUT/NAME.log; a failure fails the check
    local seconds=$1 name=$2
    shift 2
    echo "== $name (at most ${seconds} s)"
    timeout "$seconds" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -25 "$OUT/$name.log"
    [ "$rc" -eq 0 ] || { echo "== $name failed: exit $rc"; status=1; }
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c 'import sys, cupy, numpy, pyarrow, memphis.gpu
print("cupy", cupy.__version__, "numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "usable", memphis.gpu.usable())
print("memphis imported; pyspark loaded:", "pyspark" in sys.modules)' || status=1
step 180 gpu_tier "$PY" benchmarks/gpu_tier.py --device cupy --out "$OUT"
step 120 tracing_overhead "$PY" benchmarks/tracing_overhead.py --device cupy --threads single --out "$OUT"
step 60 gpu_pytest "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_gpu_tier.py
step 120 gpu_tier_batch1024 "$PY" benchmarks/gpu_tier.py --device cupy --batch 1024 --no-transfers --out "$OUT"
"$PY" - "$OUT" <<'VERDICT' || status=1
import glob, json, os, sys
sys.path.insert(0, "benchmarks")
from rigor import ratio_interval, ratio_text
for path in sorted(glob.glob(os.path.join(sys.argv[1], "gpu_tier_cupy*.json"))):
    report = json.load(open(path))
    for w in report["workloads"]:
        if w["repeat_share"] not in (0.0, 0.8):
            continue
        speedup = ratio_interval(w["seconds"]["cupy"], w["seconds"]["memphis"])  # cupy time / memphis time
        met = speedup[2] >= 1 if w["repeat_share"] == 0.0 else speedup[1] > 1  # not slower; faster
        print(f"verdict: batch {report['batch']}, {w['repeat_share']:.0%} repeated: memphis' speed-up over cupy with "
              f"its pool {ratio_text(speedup)}; target ({'at least equal' if w['repeat_share'] == 0.0 else 'faster'})"
              f" {'met' if met else 'NOT met'}")
VERDICT
exit $status
