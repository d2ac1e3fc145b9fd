"""What a traced array costs per operation, against the same operation on plain arrays, by size.

    PYTHONPATH=python .venv/bin/python benchmarks/tracing_overhead.py [--device numpy|cupy|simulated]
        [--threads both|single|busy] [--quick] [--out DIR]

Operations: ``a + b`` and ``exp(a)`` (elementwise), ``sum(a)`` (a reduction) and the Gram matrix
``Xᵀ X`` of X with 50 columns (from 100 elements on), on float64 arrays of 10 to 10⁷ elements.
Modes, per operation and size, each timed over a batch of calls on distinct inputs (100 calls up to
10³ elements, 10 at 10⁴, one from 10⁵ on) and reported per call:
- ``plain``: the operation on plain arrays (numpy; or cupy with its default memory pool).
- ``miss``: the operation on traced arrays whose results the cache does not hold (it is cleared
  before each batch, outside the timing), under memphis's default rule: tracing, a probe, the
  operation, and a store only where the tier finds the result worth keeping (its cost against its
  measured probe+store time and the fresh memory it holds; see HostTier.worth_caching_s). The
  tier knows the operation from earlier batches, as it knows a loop's operations after the first
  iteration. The inputs' content hashes are taken before (a new input's hash is a cost of
  ``memphis.array``, not of the operation).
- ``hit``: the same operations again, served from the cache (each batch is run before, untimed,
  with every result kept: ``min_cost_s=0`` for this mode, so that a hit exists at every size). On a
device (``--device cupy``; ``simulated`` checks that code path without a GPU and times only CPU
work) the inputs live on the device and the GPU tier serves the hits; its miss is an operation's
first occurrence (the tier keeps a result from its second on), and plain runs allocate through
cupy's default pool while memphis' runs allocate through the GPU tier's pool (a pool of the same
kind, with memphis' budget as its base allocator).

Thread settings, each measured in a child process whose BLAS threads are set before numpy loads:
``single`` (1 thread) and ``busy`` (BLAS threads = cores, and a CPU-burning process per core running
throughout: no free core). Modes run in a balanced order (benchmarks/rigor.py) per operation and
size, 30 batches each up to 10⁴ elements, 20 at 10⁵, 10 above. Every result of every batch is
compared with numpy's (cupy's): any difference exits non-zero. Reported per size: medians with 95 %
intervals, the overhead (miss − plain) and the ratios, and per operation the break-even size: the
smallest size from which a hit is cheaper than plain recomputation at every larger size, and the
sizes where a miss costs more than 2× the operation. Writes tracing_overhead[_<device>].json and .md
to --out. ``--quick``: sizes 10 to 10⁴, every mode once (no warm-up), the ``single`` setting only (~15 s).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import xxhash

import memphis
import memphis.gpu
import memphis.local

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rigor import median_interval, provenance, provenance_line, ratio_interval, ratio_text, run_order  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SIZES = (10, 100, 1000, 10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7)
QUICK_SIZES = SIZES[:4]
MODES = ("plain", "miss", "hit")
GRAM_COLUMNS = 50
MAX_CALLS = 100
MISS_FLAG = 2.0  # a miss costing more than this many times the operation is flagged
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# name -> (the operation on plain or traced arrays alike, how many inputs, smallest size it runs at)
OPERATIONS = {
    "a + b": (lambda a, b: a + b, 2, 1),
    "exp(a)": (lambda a: np.exp(a), 1, 1),
    "sum(a)": (lambda a: np.sum(a), 1, 1),
    "Xᵀ X": (lambda x: x.T @ x, 1, 2 * GRAM_COLUMNS),
}


def calls_per_batch(size: int) -> int:
    """Calls timed together: enough that a batch of tiny calls takes well over the timer's resolution,
    few enough that a miss batch leaves the cache small (a store's cost grows with the entries held)."""
    return max(1, min(MAX_CALLS, 10 ** 5 // size))


def batches_per_mode(size: int) -> int:
    return 30 if size <= 10 ** 4 else 20 if size <= 10 ** 5 else 10


def shape_of(operation: str, size: int) -> tuple:
    return (size // GRAM_COLUMNS, GRAM_COLUMNS) if operation == "Xᵀ X" else (size,)


# --- the child: one thread setting, in a process of its own -------------------------------------

class Backend:
    """Where the arrays live: numpy, or a device (cupy, simulated) with memphis' GPU tier on it."""

    def __init__(self, kind: str):
        self.kind = kind
        memphis.local.configure(disk_max_bytes=0, durable_max_bytes=0)  # a miss computes, never reads a file
        self.device = self.tier = self.pool = None
        if kind != "numpy":
            from gpu_tier import PlainPool, make_device

            self.device = make_device(kind, capacity_bytes=8 << 30)
            self.tier = memphis.gpu.configure(device=self.device)
            self.pool = PlainPool(self.device)

    def plain(self, host: np.ndarray):
        return host if self.device is None else self.device.copy_to_device(host)

    def host(self, value) -> np.ndarray:
        """A host copy of a result (plain or traced) to compare answers."""
        value = value.numpy() if hasattr(value, "lineage") else value
        return np.asarray(value) if self.device is None else self.device.copy_to_host(value)

    def allocate_for(self, mode: str):
        """Plain device arrays allocate through the default pool, traced ones through memphis'; hits
        need every result kept, misses take the default rule."""
        memphis.local.tier().min_cost_s = 0.0 if mode == "hit" else None
        if self.device is not None:
            if mode == "plain":
                self.pool.install()
            else:
                self.device.use_pool(self.tier.budget.pool)

    def synchronize(self):
        if self.device is not None:
            self.device.synchronize()

    def close(self):
        if self.device is not None:
            memphis.gpu.configure(device="none")
            self.pool.close()


def run_batch(function, inputs, backend) -> tuple:
    start = time.perf_counter()
    results = [function(*arguments) for arguments in inputs]
    backend.synchronize()
    return time.perf_counter() - start, results


def measure(operation: str, size: int, backend, repeats: int, seed: int, quick: bool = False) -> dict:
    """Seconds per call of each mode, over ``repeats`` balanced batches; raises on a wrong answer."""
    function, arity, _ = OPERATIONS[operation]
    rng = np.random.default_rng(seed)
    shape = shape_of(operation, size)
    hosts = [[rng.standard_normal(shape) for _ in range(arity)] for _ in range(calls_per_batch(size))]
    plain = [[backend.plain(h) for h in args] for args in hosts]
    traced = [[memphis.array(p) for p in args] for args in plain]
    for args in traced:
        for t in args:
            t.lineage.key  # noqa: B018 -- the content hash, taken now rather than inside a timed batch
    expected = [np.asarray(function(*args)) for args in hosts] if backend.device is None else \
        [backend.host(function(*args)) for args in plain]
    inputs = {"plain": plain, "miss": traced, "hit": traced}
    seconds = {mode: [] for mode in MODES}
    order = run_order(MODES, repeats, quick=quick, seed=seed)
    for i, mode in enumerate(order):
        backend.allocate_for(mode)
        if mode == "miss":
            memphis.local.clear()
        if mode == "hit":  # the GPU tier keeps a result from its 2nd occurrence: twice
            for _ in range(1 if backend.device is None else 2):
                run_batch(function, traced, backend)
        elapsed, results = run_batch(function, inputs[mode], backend)
        for got, want in zip(results, expected):
            got = backend.host(got)
            if got.shape != want.shape or not np.array_equal(got, want):
                raise AssertionError(f"{operation} at {size} elements, mode {mode}: the result differs from "
                                     f"{'numpy' if backend.device is None else backend.kind}'s")
        if quick or i:  # the first batch of a balanced order is the warm-up
            seconds[mode].append(elapsed / len(inputs[mode]))
        del results
    memphis.local.clear()
    return seconds


def child(args) -> dict:
    """Every operation at every size in this process's thread setting: seconds per call per mode."""
    backend = Backend(args.device)
    sizes = QUICK_SIZES if args.quick else SIZES
    rows = []
    try:
        for size in sizes:
            for number, operation in enumerate(OPERATIONS):
                if size < OPERATIONS[operation][2]:
                    continue
                seconds = measure(operation, size, backend, batches_per_mode(size), seed=size + number,
                                  quick=args.quick)
                rows.append({"operation": operation, "size": size, "calls_per_batch": calls_per_batch(size),
                             "seconds_per_call": seconds})
                medians = ", ".join(f"{m} {statistics.median(s) * 1e6:.3g} µs" for m, s in seconds.items())
                print(f"  {operation:7} {size:>9}: {medians}", file=sys.stderr, flush=True)
        caching_threshold_us = memphis.local.tier().overhead_s * 1e6
    finally:
        backend.close()
    return {"rows": rows, "default_caching_threshold_us": round(caching_threshold_us, 2),
            "first_touch_ns_per_byte": round(memphis.local.tier().first_touch_s * 1e9, 3),
            "numpy": np.__version__, "xxhash": xxhash.VERSION, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}


# --- the parent: one child per thread setting, and the report -----------------------------------

def run_setting(setting: str, args) -> dict:
    """The child's measurements in ``setting``; under ``busy`` a CPU burner per core runs meanwhile."""
    cores = os.cpu_count() or 1
    threads = 1 if setting == "single" else cores
    # The child imports what this process can (memphis from a checkout or an install alike).
    env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads)),
           "PYTHONPATH": os.pathsep.join(filter(None, sys.path))}
    command = [sys.executable, os.path.abspath(__file__), "--child", "--device", args.device]
    command += ["--quick"] if args.quick else []
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(cores if setting == "busy" else 0)]
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    if done.returncode != 0:
        raise SystemExit(f"tracing_overhead: the {setting} measurement failed (exit {done.returncode}); see above")
    return {"threads": threads, "background_burners": len(burners), **json.loads(done.stdout)}


def summarize(row: dict) -> dict:
    """Medians (µs) with intervals, the miss overhead and the ratios of one operation at one size."""
    seconds = row["seconds_per_call"]
    us = {mode: [s * 1e6 for s in values] for mode, values in seconds.items()}
    summary = {mode: [round(v, 3) for v in median_interval(us[mode])] for mode in MODES}
    summary["miss_overhead_us"] = round(summary["miss"][0] - summary["plain"][0], 3)
    summary["miss_ratio"] = [round(v, 3) for v in ratio_interval(us["miss"], us["plain"])]
    summary["hit_ratio"] = [round(v, 3) for v in ratio_interval(us["hit"], us["plain"])]
    return summary


def break_even(rows: list) -> dict:
    """Per operation: the smallest size from which a hit is cheaper than plain (the interval of
    hit/plain below 1) at that size and every larger one, or None; and the sizes where a miss costs
    over MISS_FLAG× the operation."""
    found = {}
    for operation in OPERATIONS:
        mine = sorted((r for r in rows if r["operation"] == operation), key=lambda r: r["size"])
        cheaper = None
        for r in reversed(mine):
            if r["summary"]["hit_ratio"][2] >= 1:
                break
            cheaper = r["size"]
        found[operation] = {"hit_cheaper_from": cheaper,
                            "miss_over_flag_at": [r["size"] for r in mine if r["summary"]["miss_ratio"][0] > MISS_FLAG]}
    return found


def interval_text(values) -> str:
    median, low, high = values
    return f"{median:.3g} [{low:.3g}–{high:.3g}]"


def markdown(report: dict) -> str:
    device = report["device"]
    plain = {"numpy": "numpy", "cupy": "cupy (default pool)", "simulated": "simulated device"}[device]
    lines = [f"# Tracing overhead per operation ({device})", "", provenance_line(report["provenance"]), "",
             f"Command: `{report['command']}`. µs per call, medians with 95 % intervals; plain = {plain}; "
             "miss = traced, its result not in the cache (trace, probe, compute, and a store where the default rule "
             "keeps it); hit = the same call again, from the cache (every result kept); ratios are memphis / plain. "
             "Every result was compared with the plain one: all equal."]
    for setting, result in report["settings"].items():
        lines += ["", f"## {setting}: {result['threads']} BLAS thread(s), {result['background_burners']} "
                  f"CPU-burning process(es) beside it", "",
                  f"By default memphis keeps a result only when it took at least its measured probe+store time "
                  f"({result['default_caching_threshold_us']} µs here) plus what the fresh memory it holds costs "
                  f"({result['first_touch_ns_per_byte']} ns per byte here), shared by the times it was computed.", "",
                  "| operation | size | plain µs | miss µs | hit µs | miss − plain µs | miss / plain "
                  "| hit / plain |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in result["rows"]:
            s = r["summary"]
            lines.append(f"| {r['operation']} | {r['size']:.0e} | {interval_text(s['plain'])} | "
                         f"{interval_text(s['miss'])} | {interval_text(s['hit'])} | {s['miss_overhead_us']:.3g} | "
                         f"{ratio_text(s['miss_ratio'])} | {ratio_text(s['hit_ratio'])} |")
        lines += ["", "| operation | a hit is cheaper than plain from | a miss costs over "
                  f"{MISS_FLAG:g}× the operation at |", "|---|---|---|"]
        for operation, b in result["break_even"].items():
            cheaper = f"{b['hit_cheaper_from']:.0e} elements" if b["hit_cheaper_from"] else "no size measured"
            flagged = ", ".join(f"{s:.0e}" for s in b["miss_over_flag_at"]) or "no size"
            lines.append(f"| {operation} | {cheaper} | {flagged} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("numpy", "cupy", "simulated"), default="numpy")
    parser.add_argument("--threads", choices=("both", "single", "busy"), default="both")
    parser.add_argument("--quick", action="store_true", help="sizes 10 to 10⁴, every mode once, single-threaded")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    settings = ("single",) if args.quick or args.threads == "single" else ("busy",) if args.threads == "busy" \
        else ("single", "busy")
    report = {"device": args.device, "provenance": provenance(),
              "command": "benchmarks/tracing_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "settings": {}}
    for setting in settings:
        print(f"tracing overhead ({args.device}, {setting})", file=sys.stderr, flush=True)
        result = run_setting(setting, args)
        for row in result["rows"]:
            row["summary"] = summarize(row)
        result["break_even"] = break_even(result["rows"])
        report["settings"][setting] = result
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "tracing_overhead" + ("" if args.device == "numpy" else f"_{args.device}"))
    with open(base + ".json", "w") as f:
        json.dump(report, f, indent=2)
    text = markdown(report)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
