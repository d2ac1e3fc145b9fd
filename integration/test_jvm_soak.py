"""A bounded soak of the JVM tier (apps/jvm_soak.py): no deadlock, right answers, each shared entry
persisted once while it is held, the budget held, the driver's heap flat after warm-up.
MEMPHIS_JVM_SOAK_SECONDS lengthens it (default 30); run with -s to see the figures."""
import collections
import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # minutes: `make test-fast` leaves it out

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "apps", "jvm_soak.py")
THREADS = 8
MIB = 1 << 20


def decisions(log, verb):
    """How many times memphis logged `verb` (persist, evicted, invalid) for each key: "<verb> <key> (reason)"
    or "<verb> <key>: reason" ("persist <key> from n shuffle(s)" is how, not another persist)."""
    return collections.Counter(re.findall(rf"memphis: {verb} ([0-9a-f]{{32}})(?: \(|:)", log))


def test_threads_by_overlapping_queries(tmp_path):
    seconds = float(os.environ.get("MEMPHIS_JVM_SOAK_SECONDS", "30"))
    result = subprocess.run([sys.executable, APP, str(tmp_path), str(seconds), str(THREADS)],
                            capture_output=True, text=True, timeout=seconds + 300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    heap = [used for at, used in seen["heap"]]
    print(f"\nJVM soak: {seen['threads']} threads, {seen['queries']} queries in {seen['seconds']} s, "
          f"{seen['wrong']} wrong, counters {seen['counters']}, peak {seen['peak_bytes']} / {seen['budget']} bytes, "
          f"heap after GC {min(heap) / MIB:.0f}-{max(heap) / MIB:.0f} MiB")

    assert seen["hung"] == 0, "a thread still ran 60 s after the end: deadlock"
    assert not seen["errors"] and seen["wrong"] == 0 and seen["queries"] >= THREADS
    counters = seen["counters"]
    assert counters["hits"] > 0 and counters["evicted"] > 0, "the soak must exercise reuse and eviction"

    # Persisted again only after it was let go: never twice while it is held (in flight or stored).
    # After memphis.clear: nothing is held when the soak starts.
    log = result.stderr.split("memphis-soak: start")[-1]
    persists, evictions, invalid = (decisions(log, v) for v in ("persist", "evicted", "invalid"))
    assert sum(persists.values()) == counters["persisted"] and set(seen["keys"]) & set(persists)
    for key, n in persists.items():
        assert n <= evictions[key] + invalid[key] + 1, (key, n, evictions[key])

    # Over the budget only while eviction must wait (an entry still filled or read), and within it once quiet.
    assert seen["samples"] > 0 and not seen["over_budget_idle"], seen["over_budget_idle"]
    assert seen["bytes_held_quiet"] <= seen["budget"]

    # Flat after warm-up: the heap after a full GC saw-tooths (Spark's ContextCleaner frees shuffles and
    # broadcasts only after the GC that found them unreachable), so its floor is what must not climb:
    # in the last third it comes back within 64 MiB of the first half's peak (Spark's own caches,
    # code generation's among them, still fill during a short run).
    third = max(1, len(heap) // 3)
    assert len(heap) >= 4 and min(heap[-third:]) <= max(heap[:len(heap) // 2]) + 64 * MIB, seen["heap"]
