"""The GPU tier on mini-batch scoring and a PCA sweep, with and without memphis.

    PYTHONPATH=python .venv/bin/python benchmarks/gpu_tier.py --device simulated|cupy [--batches N] [--batch N] [--out DIR]

Workloads (MEMPHIS §8.2, 12b and PCA pipelines, scaled down):
- CNN-like scoring of ``--batches`` mini-batches of 32 images 16×16×3: two 3×3 conv layers as
  im2col (a gather by index) + matmul, ReLU, two fully connected layers; a share ρ of the batches
  (0/20/40/80%) repeats one of 4 recurring batches.
- PCA K-sweep: covariance and its eigh once, projections onto the top K components for K in a sweep,
  each feeding a ridge classifier for 3 λ (the projection recurs across λ).
- Transfer (cupy only): an Arrow table of 16 float64 columns to a row-major device matrix, either
  filled into a host matrix and copied once, or each column copied and stacked on the device
  (``stack_columns``, what ``memphis.collect(df, device="gpu", as_="numpy")`` does); median of 3
  after a first call.
Modes: ``no reuse`` (plain device arrays, every allocation from the device), ``memphis`` (traced
device arrays, the GPU tier, its allocator), and on cupy ``cupy pool`` (plain cupy with its memory
pool alone). Writes gpu_tier_<device>.json and .md to --out, with the counters and the device.
"""
import argparse
import json
import os
import platform
import time

import numpy as np
from tqdm import tqdm

import memphis
import memphis.gpu
import memphis.local

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SIDE, CHANNELS, FILTERS1, FILTERS2, HIDDEN, CLASSES = 16, 3, 16, 32, 128, 10
REPEAT_SHARES = (0.0, 0.2, 0.4, 0.8)
RECURRING = 4
COMPONENTS = (4, 8, 16, 24, 32, 48)
TRANSFER_MB = (4, 16, 256, 1024)
LAMBDAS = (0.1, 1.0, 10.0)


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


def make_model(rng, on_device):
    side2 = SIDE - 2
    parts = (im2col_index(SIDE, CHANNELS), rng.standard_normal((9 * CHANNELS, FILTERS1)) * 0.2,
             im2col_index(side2, FILTERS1), rng.standard_normal((9 * FILTERS1, FILTERS2)) * 0.1,
             rng.standard_normal(((side2 - 2) ** 2 * FILTERS2, HIDDEN)) * 0.01,
             rng.standard_normal((HIDDEN, CLASSES)) * 0.1)
    return tuple(on_device(p) for p in parts)


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


class Mode:
    """How a run moves data and what it counts: plain device arrays, or memphis' traced ones."""

    def __init__(self, name, device_kind, capacity):
        self.name, self.device_kind = name, device_kind
        memphis.local.configure(disk_max_bytes=0)
        memphis.gpu.configure(device="none")
        if device_kind == "simulated":
            self.device = memphis.gpu.SimulatedDevice(capacity_bytes=capacity)
        else:
            import cupy

            self.device = memphis.gpu.CupyDevice()
            cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc if name == "cupy pool" else None)
        self.tier = memphis.gpu.configure(device=self.device) if name == "memphis" else None

    def to_device(self, host):
        return memphis.gpu.to_device(host) if self.tier else self.device.copy_to_device(host)

    def to_host(self, value):
        return memphis.gpu.to_host(value).numpy() if self.tier else self.device.copy_to_host(value)

    def counters(self):
        counts = dict(self.device.counts)
        if self.tier is not None:
            stats = self.tier.stats()
            allocations = stats["recycled_allocations"] + stats["fresh_allocations"]
            counts.update(gpu_hits=stats["gpu_hits"], gpu_misses=stats["gpu_misses"],
                          recycled=stats["recycled_allocations"], fresh=stats["fresh_allocations"],
                          recycle_rate=round(stats["recycled_allocations"] / max(allocations, 1), 3),
                          evicted_to_host=stats["evicted_to_host"], gpu_deleted=stats["gpu_deleted"],
                          eviction_time_ms=stats["eviction_time_ms"])
        counts["simulated_copy_ms"] = round(self.device.copy_seconds * 1000, 3) if self.device.simulated else None
        return counts

    def close(self):
        memphis.gpu.configure(device="none")
        if self.device_kind == "cupy":
            import cupy

            cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def run_cnn(mode, share, count, seed, batch):
    rng = np.random.default_rng(seed)
    model = make_model(rng, mode.to_device)
    batches = batch_stream(rng, count, share, batch)
    start = time.perf_counter()
    scores = [mode.to_host(cnn(mode.to_device(b), model)) for b in batches]
    mode.device.synchronize()
    return time.perf_counter() - start, scores


def run_pca(mode, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((4000, 64)) @ rng.standard_normal((64, 64))
    y = np.sign(X[:, 0] + 0.5 * rng.standard_normal(4000))
    start = time.perf_counter()
    accuracy = pca_sweep(mode.to_device(X), mode.to_device(y), mode.to_device, mode.to_host)
    mode.device.synchronize()
    return time.perf_counter() - start, accuracy


def run_transfers(device, repeats=3):
    """Seconds from an Arrow table to a device matrix: host matrix then one copy, or stack_columns."""
    import pyarrow as pa

    from memphis.backends.numpy_backend import float_matrix
    from memphis.collect import _float_columns

    ways = {"host_matrix": lambda columns, rows: device.copy_to_device(float_matrix(columns, rows)),
            "stack_columns": device.stack_columns}
    rows = []
    for mb in tqdm(TRANSFER_MB, desc="transfers"):
        rng = np.random.default_rng(mb)
        table = pa.table({f"c{i}": rng.standard_normal((mb << 20) // (8 * 16)) for i in range(16)})
        seconds = {name: [] for name in ways}
        for _ in range(repeats + 1):
            for name, way in ways.items():
                start = time.perf_counter()
                value = way(_float_columns(table), table.num_rows)
                device.synchronize()
                seconds[name].append(time.perf_counter() - start)
                del value
        row = {"mb": mb}
        for name, times in seconds.items():
            row[f"{name}_first_s"] = round(times[0], 4)
            row[f"{name}_s"] = round(float(np.median(times[1:])), 4)
        row["speedup"] = round(row["host_matrix_s"] / row["stack_columns_s"], 2)
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("simulated", "cupy"), default="simulated")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="images per batch")
    parser.add_argument("--capacity", default="1g", help="simulated device capacity")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    capacity = memphis.tiers.config.parse_bytes(args.capacity)
    modes = ("no reuse", "memphis") + (("cupy pool",) if args.device == "cupy" else ())
    runs = [("cnn", share) for share in REPEAT_SHARES] + [("pca", None)]
    rows, reference = [], {}
    warmup = Mode("no reuse", args.device, capacity)  # first calls pay imports, JIT of BLAS paths, page faults
    try:
        run_cnn(warmup, 0.0, 5, seed=1, batch=args.batch)
        run_pca(warmup, seed=1)
    finally:
        warmup.close()
    with tqdm(total=len(runs) * len(modes), desc=f"gpu tier ({args.device})") as progress:
        for workload, share in runs:
            for name in modes:
                mode = Mode(name, args.device, capacity)
                try:
                    if workload == "cnn":
                        seconds, result = run_cnn(mode, share, args.batches, seed=7, batch=args.batch)
                    else:
                        seconds, result = run_pca(mode, seed=11)
                    counters = mode.counters()
                finally:
                    mode.close()
                expected = reference.setdefault((workload, share), result)
                same = (all(np.allclose(a, b, rtol=1e-9, atol=1e-9) for a, b in zip(result, expected))
                        if workload == "cnn" else result == expected)
                rows.append({"workload": workload, "repeat_share": share, "mode": name, "time_s": round(seconds, 4),
                             "same_result": bool(same), **counters})
                progress.update()
    transfers = run_transfers(memphis.gpu.CupyDevice()) if args.device == "cupy" else []
    report = {"device": args.device, "machine": platform.node(), "python": platform.python_version(),
              "batches": args.batches, "batch": args.batch, "rows": rows, "transfers": transfers}
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"gpu_tier_{args.device}" + ("" if args.batch == 32 else f"_batch{args.batch}"))
    with open(base + ".json", "w") as f:
        json.dump(report, f, indent=2)
    columns = ["workload", "repeat_share", "mode", "time_s", "same_result", "gpu_hits", "allocations", "recycle_rate", "fresh",
               "evicted_to_host", "gpu_deleted", "copies_to_device", "copies_to_host", "simulated_copy_ms"]
    lines = [f"# GPU tier on the {args.device} device",
             "", f"Ran on `{platform.node()}` with device `{args.device}`"
             f"{' (simulated: numpy stands in for the GPU; times are CPU times)' if args.device == 'simulated' else ''}; "
             f"{args.batches} batches of {args.batch} images; command: "
             f"`PYTHONPATH=python .venv/bin/python benchmarks/gpu_tier.py --device {args.device} --batch {args.batch}`.",
             "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in columns) + " |")
    if transfers:
        lines += ["", "Arrow table → device matrix: host matrix and one copy, against `stack_columns` (s):", "",
                  "| " + " | ".join(transfers[0]) + " |", "|" + "---|" * len(transfers[0])]
        lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in transfers]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
