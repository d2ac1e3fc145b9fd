"""What the driver's durable tier costs a first run and saves a second: driver ML in fresh processes.

Modes, each run a fresh Python process (one BLAS thread):

- ``off``: the durable tier off (``durable_max_bytes=0``), the baseline;
- ``first``: an empty durable folder, writes in the background (what memphis does);
- ``first-inline``: an empty durable folder, each write waited for where it is queued (the
  alternative the background writer was measured against);
- ``second``: a folder the same workload filled before (the re-run of a notebook or a job).

Each run reports ``seconds`` (until the answer is ready) and ``exit_seconds`` (until the queued
writes are on disk, which the interpreter waits for at exit). Workloads: ``ridge``, a 10-λ ridge grid
over traced arrays (the Gram matrix is the expensive value, small on disk); ``features``, a
``@memphis.reuse`` feature transform whose result is as large as its input (a large write).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=python .venv/bin/python benchmarks/durable_driver.py --repeats 5
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import rigor

MODES = ("off", "first", "first-inline", "second")

RUN_APP = r"""
import hashlib, json, sys, time
import numpy as np
import memphis, memphis.local
from memphis.tiers.durable import DurableTier

workload, mode, folder, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode == "first-inline":
    queue = DurableTier.offer
    def offer_and_wait(self, *args, **kwargs):
        queue(self, *args, **kwargs)
        self.flush()
    DurableTier.offer = offer_and_wait
memphis.local.configure(durable_dir=folder, durable_max_bytes=0 if mode == "off" else "10g")
rng = np.random.default_rng(0)
X_plain, y_plain = rng.standard_normal((rows, 200)), rng.standard_normal(rows)
W_plain = rng.standard_normal((200, 200)) / 200

@memphis.reuse
def features(X, W):
    return np.tanh(X @ W)

start = time.perf_counter()
if workload == "ridge":
    X, y = memphis.array(X_plain), memphis.array(y_plain)
    answer = [np.linalg.solve(X.T @ X + lam * np.eye(200), X.T @ y).numpy() for lam in np.logspace(-3, 3, 10)]
else:
    F = memphis.array(features(X_plain, W_plain))
    answer = [np.linalg.solve(F.T @ F + lam * np.eye(200), F.T @ y_plain).numpy() for lam in (0.1, 1.0, 10.0)]
seconds = time.perf_counter() - start
durable = memphis.local.tier().durable
if durable is not None:
    durable.flush()
exit_seconds = time.perf_counter() - start
stats = memphis.local.stats()
print(json.dumps({"answer": hashlib.blake2b(b"".join(a.tobytes() for a in answer)).hexdigest(),
                  "seconds": seconds, "exit_seconds": exit_seconds,
                  "durable_hits": stats["durable_hits"], "durable_writes": stats["durable_writes"]}))
"""


def run(workload: str, mode: str, folder: str, rows: int) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", RUN_APP, workload, mode, folder, str(rows)], capture_output=True,
                          text=True, env=env, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(workload: str, rows: int, repeats: int, quick: bool) -> dict:
    scratch = tempfile.mkdtemp(prefix="memphis-durable-bench-")
    try:
        warm = os.path.join(scratch, "warm")
        run(workload, "first", warm, rows)  # what "second" reads

        def run_one(mode, index):
            folder = warm if mode == "second" else os.path.join(scratch, f"run-{index}")
            figures = run(workload, mode, folder, rows)
            if mode != "second":
                shutil.rmtree(folder, ignore_errors=True)
            return figures.pop("answer"), figures

        return rigor.run_checked(MODES, run_one, repeats=repeats, quick=quick, desc=workload)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=rigor.DEFAULT_REPEATS)
    parser.add_argument("--workloads", default="ridge,features")
    parser.add_argument("--quick", action="store_true", help="every mode once: answers checked, timings meaningless")
    parser.add_argument("--out", default=os.path.join(rigor.HERE, "results", "durable_driver"))
    args = parser.parse_args()
    report = {"provenance": rigor.provenance(), "rows": args.rows, "workloads": {}}
    lines = ["# The driver's durable tier: first and second runs in fresh processes", "",
             f"{args.rows} × 200 float64, one BLAS thread, {rigor.runs_text(args.quick, args.repeats)}; "
             + rigor.provenance_line(report["provenance"]), "",
             "| workload | mode | seconds to the answer | seconds to exit (writes done) | durable writes / hits | "
             "answer / off | exit / off |", "|---|---|---|---|---|---|---|"]
    for workload in args.workloads.split(","):
        runs = measure(workload, args.rows, args.repeats, args.quick)
        exits = {mode: [{"seconds": s["exit_seconds"]} for s in samples] for mode, samples in runs.items()}
        ratios, exit_ratios = rigor.ratios_to(runs, "off"), rigor.ratios_to(exits, "off")
        report["workloads"][workload] = {mode: {**rigor.seconds_summary(samples), "figures": samples}
                                         for mode, samples in runs.items()}
        for mode, samples in runs.items():
            lines.append(f"| {workload} | {mode} | {rigor.seconds_text([s['seconds'] for s in samples])} | "
                         f"{rigor.seconds_text([s['exit_seconds'] for s in samples])} | "
                         f"{samples[-1]['durable_writes']} / {samples[-1]['durable_hits']} | "
                         f"{ratios.get(f'{mode} / off', '1')} | {exit_ratios.get(f'{mode} / off', '1')} |")
    rigor.write_results(args.out, "durable_driver", report, lines)


if __name__ == "__main__":
    main()
