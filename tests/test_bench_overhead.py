"""benchmarks/tracing_overhead.py and benchmarks/gpu_tier.py in their quick modes: every mode runs and
answers as the plain arrays do, and a wrong answer fails the run (timings are not checked)."""
import json

import numpy as np
import pytest

import gpu_tier  # from benchmarks/, which conftest puts on the path
import memphis
import memphis.local
import tracing_overhead


@pytest.mark.parametrize("device", ["numpy", "simulated"])
def test_tracing_overhead_quick_times_every_mode_at_every_size(tmp_path, device):
    assert tracing_overhead.main(["--quick", "--device", device, "--out", str(tmp_path)]) == 0
    name = "tracing_overhead" + ("" if device == "numpy" else "_" + device)
    report = json.loads((tmp_path / f"{name}.json").read_text())
    assert list(report["settings"]) == ["single"] and report["provenance"]["commit"]
    setting = report["settings"]["single"]
    assert setting["threads"] == 1 and setting["blas_threads"] == "1"
    measured = {(r["operation"], r["size"]) for r in setting["rows"]}
    assert measured == {(op, size) for op, (_, _, smallest) in tracing_overhead.OPERATIONS.items()
                        for size in tracing_overhead.QUICK_SIZES if size >= smallest}
    for row in setting["rows"]:
        assert {m: len(s) for m, s in row["seconds_per_call"].items()} == dict.fromkeys(tracing_overhead.MODES, 1)
    assert set(setting["break_even"]) == set(tracing_overhead.OPERATIONS)
    assert "| a + b | 1e+01 |" in (tmp_path / f"{name}.md").read_text()


def test_tracing_overhead_fails_on_a_traced_answer_that_differs(local_tier, monkeypatch):
    wrong = lambda a: a + 1 if isinstance(a, memphis.local.TracedArray) else a + 0  # noqa: E731
    monkeypatch.setitem(tracing_overhead.OPERATIONS, "a + 0", (wrong, 1, 1))
    backend = tracing_overhead.Backend("numpy")
    with pytest.raises(AssertionError, match="a \\+ 0 at 10 elements, mode miss"):
        tracing_overhead.measure("a + 0", 10, backend, repeats=1, seed=0, quick=True)


def test_the_miss_and_hit_modes_are_what_they_say(local_tier):
    backend = tracing_overhead.Backend("numpy")
    seconds = tracing_overhead.measure("a + b", 1000, backend, repeats=1, seed=0, quick=True)
    stats = memphis.local.stats()
    calls = tracing_overhead.calls_per_batch(1000)
    assert all(len(s) == 1 for s in seconds.values())
    # The miss batch keeps none of these cheap results, or a few (the default rule keeps by measured
    # cost, and a call a scheduler pause made slow may be kept); the hit batch's priming run computes
    # the rest again and keeps them all, so the hit batch finds every one. Hits beyond one batch's are
    # the miss batch's kept results less the hit batch's misses: none of the latter, at most a tenth
    # of the former.
    hits_beyond_the_hit_batch = stats["hits"] - calls
    assert stats["hits"] + stats["misses"] == 3 * calls
    assert 0 <= hits_beyond_the_hit_batch <= calls // 10


def test_gpu_tier_quick_runs_every_mode_with_equal_answers_and_evicts_under_the_tight_budget(tmp_path):
    assert gpu_tier.main(["--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_tier_simulated.json").read_text())
    assert report["modes"] == ["plain", "memphis", gpu_tier.TIGHT] and report["mismatches"] == []
    assert len(report["workloads"]) == len(gpu_tier.REPEAT_SHARES) + 1
    for workload in report["workloads"]:
        assert {m: len(s) for m, s in workload["seconds"].items()} == dict.fromkeys(report["modes"], 1)
    heavy = next(w for w in report["workloads"] if w["repeat_share"] == max(gpu_tier.REPEAT_SHARES))
    tight = heavy["counters"][gpu_tier.TIGHT]
    assert tight["budget_bytes"] == heavy["tight_budget_bytes"] < heavy["counters"]["memphis"]["peak_device_bytes"]
    assert tight["evicted_to_host"] + tight["gpu_deleted"] > 0 and heavy["counters"]["memphis"]["gpu_hits"] > 0
    assert report["transfers"][0]["mb"] == 1
    assert "Every run's answer equals the reference." in (tmp_path / "gpu_tier_simulated.md").read_text()


def test_gpu_tier_fails_when_a_mode_answers_differently(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_tier, "REPEAT_SHARES", (0.8,))
    shifted = lambda x: (x > 0) * x + (1.0 if isinstance(x, memphis.local.TracedArray) else 0.0)  # noqa: E731
    monkeypatch.setattr(gpu_tier, "relu", shifted)
    assert gpu_tier.main(["--quick", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_tier_simulated.json").read_text())
    assert any("memphis" in m for m in report["mismatches"]) and not any("(plain)" in m for m in report["mismatches"])


def test_the_plain_pool_recycles_freed_buffers_as_cupys_does():
    device = gpu_tier.make_device("simulated", 1 << 20)
    pool = gpu_tier.PlainPool(device)
    for _ in range(3):
        x = device.copy_to_device(np.ones(1000))
        del x
    assert device.counts["allocations"] == 1 and pool.peak_bytes() == 8000
    pool.close()
    device.close()
    assert device.bytes_in_use == 0
