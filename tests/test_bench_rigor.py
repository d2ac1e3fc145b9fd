"""The statistics every benchmark script reports with (benchmarks/rigor.py)."""
import collections
import random

import pytest
from rigor import balanced_order, median_interval, provenance, ratio_interval, ratio_text  # from benchmarks/ (conftest)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 6])
def test_every_mode_follows_every_other_equally_often(count):
    modes = [f"m{i}" for i in range(count)]
    order = balanced_order(modes, repeats=10, seed=3)
    timed = collections.Counter(order[1:])  # the first run is the warm-up
    assert set(timed) == set(modes) and min(timed.values()) >= 10
    if count > 1:
        pairs = collections.Counter(zip(order, order[1:]))
        assert all(a != b for a, b in pairs), "a mode followed itself"
        assert len(pairs) == count * (count - 1) and len(set(pairs.values())) == 1
    assert balanced_order(modes, repeats=10, seed=3) == order


def test_the_median_interval_holds_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    held = sum(low <= 0 <= high for _, low, high in
               (median_interval([rng.gauss(0, 1) for _ in range(10)]) for _ in range(2000)))
    assert 0.93 * 2000 <= held <= 0.995 * 2000


def test_a_ratio_whose_interval_holds_one_reads_as_no_difference():
    rng = random.Random(2)
    same = ratio_interval([rng.gauss(1, 0.1) for _ in range(10)], [rng.gauss(1, 0.1) for _ in range(10)])
    assert same[1] < 1 < same[2] and ratio_text(same).startswith("no difference")
    faster = ratio_interval([rng.gauss(1, 0.05) for _ in range(10)], [rng.gauss(2, 0.1) for _ in range(10)])
    assert faster[2] < 1 and ratio_text(faster).startswith("0.")


def test_a_result_records_its_commit_date_and_machine():
    p = provenance()
    assert p["commit"] != "unknown" and p["date"].startswith("20")
    assert p["machine"]["cpus"] >= 1 and p["machine"]["memory_bytes"] > 0
