"""The GPU tier on mini-batch scoring and a PCA sweep, against plain device arrays.

    PYTHONPATH=python .venv/bin/python benchmarks/gpu_tier.py --device simulated|cupy [--batches N] [--batch N]
        [--repeats N] [--no-transfers] [--quick] [--out DIR]

On the simulated device numpy does the device's work: run it with OPENBLAS_NUM_THREADS=1 (on a
loaded 2-core machine multi-threaded BLAS took a run from 0.5 s to 5-14 s).

Workloads (MEMPHIS §8.2, 12b and PCA pipelines, scaled down):
- CNN-like scoring of ``--batches`` mini-batches of ``--batch`` images 16×16×3: two 3×3 conv layers
  as im2col (a gather by index) + matmul, ReLU, two fully connected layers; a share ρ of the
  batches (0/20/40/80%) repeats one of 4 recurring batches.
- PCA K-sweep: covariance and its eigh once, projections onto the top K components for K in a sweep,
  each feeding a ridge classifier for 3 λ (the projection recurs across λ).
- Transfer (cupy, and --quick to check the code): an Arrow table of 16 float64 columns to a
  row-major device matrix, either filled into a host matrix and copied once, or each column copied
  and stacked on the device (``stack_columns``, what ``memphis.collect(df, device="gpu",
  as_="numpy")`` does). On the simulated device both ways fill a host matrix.
Modes:
- ``cupy`` (on the simulated device ``plain``): plain device arrays allocated as a user's are by
  default: through cupy's default memory pool, which keeps freed blocks for later allocations (on
  the simulated device, a plain ``SimulatedPool``, which behaves like it). Each run starts with an
  empty pool, as memphis' runs start with an empty one. (The old ``no reuse`` mode, cupy with its
  pool off, is gone: no user runs cupy that way.)
- ``memphis``: traced device arrays, the GPU tier with its default budget: a pool of the same kind
  (cupy's ``MemoryPool``), with memphis' budget as its base allocator.
- ``memphis, tight budget``: the same with the budget (``memphis.gpu.configure(budget_bytes=...)``)
  at the plain run's peak device bytes plus half of what memphis' cache adds to it, so that cached
  values are evicted (to the host tier when recomputing them costs more than the copy).
Each workload runs its modes in a balanced order (benchmarks/rigor.py), ``--repeats`` (10) timed
runs each after an untimed warm-up; before them one plain and one memphis run, untimed, give the
reference answer and the tight budget. Every run's answer is compared with the reference (scores
within 1e-9, accuracies equal): a difference exits non-zero. Reported: median seconds with 95 %
intervals, the speed-up over the plain mode, and the counters of each mode's last run (GPU hits,
allocations, evictions, bytes copied, eviction time). Writes gpu_tier_<device>[_batchN].json and .md
to --out. ``--quick``: the simulated device, 12 batches of 8 images, every mode once, 1 MB transfers.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import memphis  # noqa: E402
import memphis.gpu  # noqa: E402
import memphis.local  # noqa: E402
from memphis.tiers.config import parse_bytes  # noqa: E402
from rigor import (DEFAULT_REPEATS, median_interval, provenance, provenance_line, run_order,  # noqa: E402
                   ratio_interval, ratio_text)

RESULTS = os.path.join(HERE, "results")
SIDE, CHANNELS, FILTERS1, FILTERS2, HIDDEN, CLASSES = 16, 3, 16, 32, 128, 10
REPEAT_SHARES = (0.0, 0.2, 0.4, 0.8)
RECURRING = 4
COMPONENTS = (4, 8, 16, 24, 32, 48)
TRANSFER_MB = (4, 16, 256, 1024)
LAMBDAS = (0.1, 1.0, 10.0)
TIGHT_SHARE = 0.5  # of the bytes memphis' cache adds to the plain run's peak, what the tight budget allows
TIGHT = "memphis, tight budget"


def im2col_index(side, channels, kernel=3):
    """Indexes of the k×k×C patches of an image stored flat in (H, W, C) order: (patches, k·k·C)."""
    out = side - kernel + 1
    rows = []
    for i in range(out):
        for j in range(out):
            rows.append([((i + di) * side + (j + dj)) * channels + c
                         for di in range(kernel) for dj in range(kernel) for c in range(channels)])
    return np.array(rows, dtype=np.int64)


def relu(x):
    return (x > 0) * x


def conv(X, index, W):
    """A 3×3 convolution of flat images X (B, H·W·C) as im2col + matmul: (B, H'·W'·F)."""
    patches = X[:, index]  # (B, P, k·k·C): a gather by index
    columns = np.reshape(patches, (patches.shape[0] * patches.shape[1], patches.shape[2]))
    return np.reshape(relu(columns @ W), (X.shape[0], -1))


def cnn(X, model):
    index1, W1, index2, W2, F1, F2 = model
    hidden = relu(conv(conv(X, index1, W1), index2, W2) @ F1)
    return hidden @ F2


def make_model(rng):
    side2 = SIDE - 2
    return (im2col_index(SIDE, CHANNELS), rng.standard_normal((9 * CHANNELS, FILTERS1)) * 0.2,
            im2col_index(side2, FILTERS1), rng.standard_normal((9 * FILTERS1, FILTERS2)) * 0.1,
            rng.standard_normal(((side2 - 2) ** 2 * FILTERS2, HIDDEN)) * 0.01,
            rng.standard_normal((HIDDEN, CLASSES)) * 0.1)


def batch_stream(rng, count, share, batch):
    recurring = [rng.standard_normal((batch, SIDE * SIDE * CHANNELS)) for _ in range(RECURRING)]
    repeats = set(rng.choice(count, size=int(round(share * count)), replace=False).tolist())
    return [recurring[i % RECURRING] if i in repeats else rng.standard_normal((batch, SIDE * SIDE * CHANNELS))
            for i in range(count)]


def pca_sweep(X, y, to_device, to_host):
    """Accuracy of a ridge classifier on the top-K principal components, per (K, λ)."""
    centered = X - np.mean(X, axis=0)
    covariance = centered.T @ centered / X.shape[0]
    _, vectors = np.linalg.eigh(covariance)
    accuracy = {}
    for lam in LAMBDAS:
        for k in COMPONENTS:
            P = centered @ vectors[:, -k:]
            w = np.linalg.solve(P.T @ P + lam * to_device(np.eye(k)), P.T @ y)
            accuracy[(k, lam)] = float(np.mean(to_host((P @ w > 0) == (y > 0))))
    return accuracy


def make_device(kind: str, capacity_bytes: int):
    if kind == "simulated":
        return memphis.gpu.SimulatedDevice(capacity_bytes=capacity_bytes)
    return memphis.gpu.CupyDevice()


class PlainPool:
    """How plain device arrays are allocated by default, installed on ``device``: cupy's default
    memory pool, emptied first; on the simulated device a plain ``SimulatedPool`` (no budget)."""

    def __init__(self, device):
        self.device = device
        if device.simulated:
            self._pool = device.memory_pool()
        else:
            import cupy

            self._pool = cupy.get_default_memory_pool()
            self._pool.free_all_blocks()
        self.install()

    def install(self):
        self.device.use_pool(self._pool)  # cupy: cupy.cuda.set_allocator(pool.malloc)

    def peak_bytes(self) -> int:
        """Device bytes the pool took (it keeps what it took: its high-water mark)."""
        return self._pool.total_bytes()

    def close(self):
        self._pool.free_all_blocks()


class Mode:
    """One run's device and how it allocates: plain arrays through the default pool, or memphis'
    traced arrays in a fresh GPU tier (with ``budget_bytes``, else the default budget)."""

    def __init__(self, name, device_kind, capacity, budget_bytes=None):
        self.name = name
        memphis.local.configure(disk_max_bytes=0, durable_max_bytes=0)  # every run from empty caches
        memphis.gpu.configure(device="none")
        self.device = make_device(device_kind, capacity)
        traced = name.startswith("memphis")
        self.tier = memphis.gpu.configure(device=self.device, budget_bytes=budget_bytes) if traced else None
        self.pool = None if traced else PlainPool(self.device)

    def to_device(self, host):
        return memphis.gpu.to_device(host) if self.tier else self.device.copy_to_device(host)

    def to_host(self, value):
        return memphis.gpu.to_host(value).numpy() if self.tier else self.device.copy_to_host(value)

    def peak_bytes(self) -> int:
        return self.tier.budget.bytes_in_pool if self.tier else self.pool.peak_bytes()

    def counters(self):
        counts = {k: self.device.counts[k] for k in ("copies_to_device", "copies_to_host", "bytes_to_host")}
        counts["peak_device_bytes"] = self.peak_bytes()
        if self.tier is not None:
            stats = self.tier.stats()
            counts.update(budget_bytes=self.tier.budget_bytes, gpu_hits=stats["gpu_hits"],
                          # cupy's pool recycles in C, uncounted: left blank there
                          recycled=stats["recycled_allocations"] if self.device.simulated else None,
                          fresh=stats["fresh_allocations"],
                          evicted_to_host=stats["evicted_to_host"], gpu_deleted=stats["gpu_deleted"],
                          eviction_time_ms=stats["eviction_time_ms"])
        return counts

    def close(self):
        memphis.gpu.configure(device="none")
        if self.pool is not None:
            self.pool.close()
            self.device.close()


def run_cnn(mode, data):
    model_host, batches = data
    model = tuple(mode.to_device(p) for p in model_host)
    start = time.perf_counter()
    scores = [mode.to_host(cnn(mode.to_device(b), model)) for b in batches]
    mode.device.synchronize()
    return time.perf_counter() - start, scores


def run_pca(mode, data):
    X, y = data
    start = time.perf_counter()
    accuracy = pca_sweep(mode.to_device(X), mode.to_device(y), mode.to_device, mode.to_host)
    mode.device.synchronize()
    return time.perf_counter() - start, accuracy


def same_answer(result, reference) -> bool:
    if isinstance(reference, dict):
        return result == reference
    return len(result) == len(reference) and all(
        a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-9) for a, b in zip(result, reference))


def workloads(batches, batch):
    """(name, repeat share, run function, host data), the data made once per workload."""
    found = []
    for share in REPEAT_SHARES:
        rng = np.random.default_rng(7)
        found.append(("cnn", share, run_cnn, (make_model(rng), batch_stream(rng, batches, share, batch))))
    rng = np.random.default_rng(11)
    X = rng.standard_normal((4000, 64)) @ rng.standard_normal((64, 64))
    found.append(("pca", None, run_pca, (X, np.sign(X[:, 0] + 0.5 * rng.standard_normal(4000)))))
    return found


def run_workload(run, data, modes, args, capacity, progress) -> dict:
    """Seconds and last counters per mode; the tight budget; the runs whose answers differ."""
    def once(name, budget=None):
        mode = Mode(name, args.device, capacity, budget)
        try:
            seconds, result = run(mode, data)
            return seconds, result, mode.counters()
        finally:
            mode.close()
    _, reference, plain = once(modes[0])
    _, _, cached = once("memphis")
    extra = max(cached["peak_device_bytes"] - plain["peak_device_bytes"], 0)
    budget = plain["peak_device_bytes"] + int(TIGHT_SHARE * extra)
    order = run_order(modes, args.repeats, quick=args.quick)
    seconds, counters, mismatches = {m: [] for m in modes}, {}, []
    for i, name in enumerate(order):
        elapsed, result, counters[name] = once(name, budget if name == TIGHT else None)
        if not same_answer(result, reference):
            mismatches.append(f"run {i} ({name})")
        if args.quick or i:  # the first run of a balanced order is the warm-up
            seconds[name].append(elapsed)
        progress.update()
    return {"seconds": seconds, "counters": counters, "tight_budget_bytes": budget, "mismatches": mismatches}


def run_transfers(device_kind, sizes_mb, repeats, quick):
    """Seconds from an Arrow table to a device matrix: a host matrix and one copy, or stack_columns."""
    import pyarrow as pa

    from memphis.backends.numpy_backend import float_matrix
    from memphis.spark.collect import _float_columns

    device = make_device(device_kind, 8 << 30)
    ways = {"host_matrix": lambda columns, rows: device.copy_to_device(float_matrix(columns, rows)),
            "stack_columns": device.stack_columns}
    rows, mismatches = [], []
    for mb in tqdm(sizes_mb, desc="transfers"):
        rng = np.random.default_rng(mb)
        table = pa.table({f"c{i}": rng.standard_normal((mb << 20) // (8 * 16)) for i in range(16)})
        seconds, answers = {name: [] for name in ways}, {}
        order = run_order(ways, repeats, quick=quick)
        for i, name in enumerate(order):
            start = time.perf_counter()
            value = ways[name](_float_columns(table), table.num_rows)
            device.synchronize()
            if quick or i:
                seconds[name].append(time.perf_counter() - start)
            answers[name] = device.copy_to_host(value)
            del value
        if not np.array_equal(answers["host_matrix"], answers["stack_columns"]):
            mismatches.append(f"transfer of {mb} MB")
        speedup = ratio_interval(seconds["host_matrix"], seconds["stack_columns"])
        rows.append({"mb": mb, "seconds": seconds, "speedup": [round(v, 3) for v in speedup]})
    device.close()
    return rows, mismatches


def interval_text(values) -> str:
    median, low, high = median_interval(values)
    return f"{median:.4g} [{low:.4g}–{high:.4g}]"


COUNTER_COLUMNS = ("gpu_hits", "recycled", "fresh", "peak_device_bytes", "evicted_to_host", "gpu_deleted",
                   "eviction_time_ms", "copies_to_device", "copies_to_host", "bytes_to_host")


def markdown(report, command) -> str:
    device, baseline = report["device"], report["modes"][0]
    lines = [f"# GPU tier on the {device} device", "", provenance_line(report["provenance"]), "",
             f"Command: `{command}`; {report['batches']} batches of {report['batch']} images; "
             f"{report['repeats']} timed runs per mode in a balanced order. Seconds: medians with 95 % intervals; "
             f"speed-up: {baseline} time / mode time. Baseline `{baseline}`: "
             + ("plain cupy with its default memory pool." if device == "cupy" else
                "the simulated device's plain arrays through a pool like cupy's (numpy stands in for the GPU: "
                "times are CPU times).")
             + f" `{TIGHT}`: the budget at the plain run's peak plus {TIGHT_SHARE:g} of what memphis' cache adds. "
             "Counters: each mode's last run. "
             + ("Answers that differ: " + "; ".join(report["mismatches"]) if report["mismatches"]
                else "Every run's answer equals the reference."), "",
             "| workload | ρ | mode | seconds | speed-up | " + " | ".join(COUNTER_COLUMNS) + " |",
             "|" + "---|" * (5 + len(COUNTER_COLUMNS))]
    for w in report["workloads"]:
        for mode, seconds in w["seconds"].items():
            speedup = "" if mode == baseline else ratio_text(ratio_interval(w["seconds"][baseline], seconds))
            counters = " | ".join("" if w["counters"][mode].get(c) is None else str(w["counters"][mode][c])
                                  for c in COUNTER_COLUMNS)
            lines.append(f"| {w['workload']} | {'' if w['repeat_share'] is None else w['repeat_share']} | {mode} | "
                         f"{interval_text(seconds)} | {speedup} | {counters} |")
    lines += ["", "Tight budgets (bytes): " + ", ".join(
        f"{w['workload']} {'' if w['repeat_share'] is None else w['repeat_share']}: {w['tight_budget_bytes']}"
        for w in report["workloads"])]
    if report["transfers"]:
        lines += ["", "Arrow table → device matrix: a host matrix and one copy, against `stack_columns` (s):", "",
                  "| MB | host matrix | stack_columns | speed-up |", "|---|---|---|---|"]
        lines += [f"| {t['mb']} | {interval_text(t['seconds']['host_matrix'])} | "
                  f"{interval_text(t['seconds']['stack_columns'])} | {ratio_text(t['speedup'])} |"
                  for t in report["transfers"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("simulated", "cupy"), default="simulated")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="images per batch")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="timed runs per mode")
    parser.add_argument("--capacity", default="1g", help="simulated device capacity")
    parser.add_argument("--no-transfers", action="store_true", help="leave the Arrow → device transfers out")
    parser.add_argument("--quick", action="store_true", help="simulated, 12 batches of 8 images, every mode once")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.device, args.batches, args.batch, args.repeats = "simulated", 12, 8, 1
    capacity = parse_bytes(args.capacity)
    modes = ("cupy" if args.device == "cupy" else "plain", "memphis", TIGHT)
    report = {"device": args.device, "provenance": provenance(), "batches": args.batches, "batch": args.batch,
              "repeats": args.repeats, "modes": modes, "workloads": [], "transfers": []}
    mismatches = []
    chosen = workloads(args.batches, args.batch)
    runs_per_workload = len(run_order(modes, args.repeats, quick=args.quick))
    with tqdm(total=len(chosen) * runs_per_workload, desc=f"gpu tier ({args.device})") as progress:
        for name, share, run, data in chosen:
            result = run_workload(run, data, modes, args, capacity, progress)
            mismatches += [f"{name} ρ={share} {m}" for m in result.pop("mismatches")]
            report["workloads"].append({"workload": name, "repeat_share": share, **result})
    if (args.device == "cupy" or args.quick) and not args.no_transfers:
        sizes_mb = (1,) if args.quick else TRANSFER_MB
        report["transfers"], wrong = run_transfers(args.device, sizes_mb, args.repeats, args.quick)
        mismatches += wrong
    report["mismatches"] = mismatches
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.batch == 32 or args.quick else f"_batch{args.batch}"
    base = os.path.join(args.out, f"gpu_tier_{args.device}{suffix}")
    with open(base + ".json", "w") as f:
        json.dump(report, f, indent=2)
    text = markdown(report, "benchmarks/gpu_tier.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    if mismatches:
        print("gpu_tier: answers differ: " + "; ".join(mismatches), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
