"""The driver's durable tier: results that outlive the process, never stale, never a wrong answer.

A second process is started only where a new process is the point (keys, reuse across runs, a
killed writer); two tiers over one folder stand for two processes elsewhere, since they share
nothing but the files.
"""
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import memphis
import memphis.local
from conftest import run_python
from memphis.tiers import config
from memphis.tiers import durable as durable_module
from memphis.tiers.disk import read_payload, write_entry_file
from memphis.tiers.durable import DurableTier
from memphis.tiers.host import HostTier
from memphis.tracing.lineage import LineageItem

ITEM = LineageItem("test", literals=(("int", "1"),))
OTHER_ITEM = LineageItem("test", literals=(("int", "2"),))


def frozen(value):
    value.flags.writeable = False
    return value


def durable_tier(root, **settings):
    return DurableTier(root=str(root), max_bytes=settings.pop("max_bytes", 1 << 30), min_cost_s=0.0, **settings)


def written(tier, value, *, item=ITEM, cost_s=1.0):
    """The path of ``value`` written by ``tier`` under ``item``'s key."""
    tier.offer(item.key, item, frozen(value), cost_s=cost_s, size=value.nbytes)
    tier.flush()
    return os.path.join(tier.folder, item.key)


@pytest.fixture
def durable_folder(tmp_path):
    """memphis.local with a durable tier in a folder of this test, caching every result; off again after."""
    memphis.local.configure(host_max_bytes=64 << 20, disk_dir=str(tmp_path / "spill"),
                            durable_dir=str(tmp_path / "durable"), min_cost_s=0.0)
    yield str(tmp_path / "durable")
    memphis.local.configure()


# --- keys are the same in every process ---------------------------------------------------------

KEYS_APP = r"""
import json
import numpy as np
import memphis, memphis.local

memphis.local.configure(min_cost_s=0.0, durable_max_bytes=0)

@memphis.reuse
def scaled(X, kind="a", options=None):
    return X * (2.0 if kind in {"a", "b", "c", "d", "e"} else 3.0)  # a frozenset constant

X = memphis.array(np.arange(12.0).reshape(4, 3))
G = X.T @ X
np.linalg.inv(G + memphis.local.eye(3))
scaled(X, options={"p": 1, "q": (1.5, "x"), "r": None})
memphis.local.random((3, 3), seed=5) @ X.T
print(json.dumps(sorted(memphis.local.entries()["key"].tolist())))
"""


def test_lineage_keys_are_the_same_in_every_process():
    keys = [run_python(KEYS_APP, env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    assert keys[0] == keys[1] and len(keys[0]) >= 5


def test_an_arrays_key_is_fixed_across_versions_of_its_hash_library():
    """Durable files are found by key in later processes, whichever xxhash is installed there (3.x
    hashes with SSE2 only, 4.1 dispatches to AVX2/AVX-512: the same xxh3). Both values were taken
    under xxhash 3.6.0 and 4.1.0; a change to how an array is keyed must change them knowingly."""
    X = np.arange(12.0).reshape(4, 3)
    assert memphis.array(X).lineage.key == "8ea096ec4d17e3081e1c91e61b36451d"
    assert memphis.array(np.asfortranarray(X)).lineage.key == "8ea096ec4d17e3081e1c91e61b36451d"
    assert memphis.array(X.astype(np.float32)).lineage.key != "8ea096ec4d17e3081e1c91e61b36451d"


# --- a grid search read back in a second process ------------------------------------------------

GRID_APP = r"""
import json, sys
import numpy as np
import memphis, memphis.local

def grid_search(folder, changed, out):
    memphis.local.configure(durable_dir=folder, min_cost_s=0.0)
    X_plain, y_plain = data(changed)
    X, y = memphis.array(X_plain), memphis.array(y_plain)
    for lam in (0.1, 1.0, 10.0):
        np.linalg.solve(X.T @ X + lam * np.eye(40), X.T @ y)
    np.save(out, (X.T @ X).numpy())
    memphis.local.tier().durable.flush()
    stats = memphis.local.stats()
    memphis.local.configure()
    return stats

def data(changed):
    rng = np.random.default_rng(7)
    X, y = rng.standard_normal((2000, 40)), rng.standard_normal(2000)
    if changed:
        X[123, 7] += 1.0
    return X, y

if __name__ == "__main__":
    print(json.dumps(grid_search(sys.argv[1], sys.argv[2] == "changed", sys.argv[3])))
"""


def test_a_grid_search_reads_its_gram_matrix_from_the_durable_tier_in_a_second_process(tmp_path):
    grid = {"__name__": "grid"}
    exec(GRID_APP, grid)
    folder = str(tmp_path / "durable")
    first = grid["grid_search"](folder, False, str(tmp_path / "first.npy"))
    assert first["durable_hits"] == 0 and first["durable_writes"] == first["computed"] == 8

    second = run_python(GRID_APP, folder, "same", str(tmp_path / "second.npy"))
    assert second["computed"] == 0 and second["durable_hits"] == 8  # the Gram matrix, Xᵀy, sums, solves
    X, _ = grid["data"](False)
    gram = np.load(tmp_path / "first.npy")
    np.testing.assert_array_equal(gram, X.T @ X)
    assert np.load(tmp_path / "second.npy").tobytes() == gram.tobytes()  # bit for bit

    changed = run_python(GRID_APP, folder, "changed", str(tmp_path / "changed.npy"))
    assert changed["durable_hits"] == 0 and changed["computed"] == 8  # a changed input: other keys
    X_changed, _ = grid["data"](True)
    np.testing.assert_array_equal(np.load(tmp_path / "changed.npy"), X_changed.T @ X_changed)


REUSE_APP = r"""
import json, sys
import numpy as np
import memphis, memphis.local

memphis.local.configure(durable_dir=sys.argv[1], min_cost_s=0.0)
calls = []

@memphis.reuse
def gram(X, scale=1.0):
    calls.append(1)
    return (X.T @ X) * scale

G = gram(np.random.default_rng(3).standard_normal((500, 20)), scale=2.0)
memphis.local.tier().durable.flush()
np.save(sys.argv[2], G)
print(json.dumps({"calls": len(calls), **memphis.local.stats()}))
"""


def test_a_reused_functions_result_is_served_in_a_second_process(tmp_path):
    folder = str(tmp_path / "durable")
    first = run_python(REUSE_APP, folder, str(tmp_path / "first.npy"), env={**os.environ, "PYTHONHASHSEED": "1"})
    second = run_python(REUSE_APP, folder, str(tmp_path / "second.npy"), env={**os.environ, "PYTHONHASHSEED": "2"})
    assert (first["calls"], first["durable_writes"]) == (1, 1)
    assert (second["calls"], second["durable_hits"], second["computed"]) == (0, 1, 0)
    assert np.load(tmp_path / "second.npy").tobytes() == np.load(tmp_path / "first.npy").tobytes()


# --- concurrent and killed writers --------------------------------------------------------------

def test_two_writers_of_one_key_both_commit_whole_files(tmp_path, monkeypatch):
    real = durable_module.write_entry_file
    both_written = threading.Barrier(2, timeout=30)

    def write_then_wait(*args, **kwargs):  # both temp files exist before either is renamed
        made = real(*args, **kwargs)
        both_written.wait()
        return made

    monkeypatch.setattr(durable_module, "write_entry_file", write_then_wait)
    writers = [durable_tier(tmp_path) for _ in range(2)]
    value = np.arange(10_000.0)
    for writer in writers:
        writer.offer(ITEM.key, ITEM, frozen(value.copy()), cost_s=1.0, size=value.nbytes)
    for writer in writers:
        writer.flush()
    assert [w.stats()["durable_writes"] for w in writers] == [1, 1]
    assert os.listdir(writers[0].folder) == [ITEM.key]  # no temp file left
    got, cost = durable_tier(tmp_path).read(ITEM.key, ITEM)
    np.testing.assert_array_equal(got, value)
    assert cost == 1.0


KILLED_WRITER_APP = r"""
import sys, time
import numpy as np
from memphis.tiers import disk
from memphis.tiers.durable import DurableTier
from memphis.tracing.lineage import LineageItem

root, marker = sys.argv[1], sys.argv[2]

def half_then_hang(fmt, value, out):
    out.write(b"\0" * 4096)
    out.f.flush()
    open(marker, "w").close()
    time.sleep(120)

disk._write_payload = half_then_hang
item = LineageItem("test", literals=(("int", "1"),))
value = np.arange(100_000.0)
value.flags.writeable = False
tier = DurableTier(root=root, max_bytes=1 << 30, min_cost_s=0.0)
tier.offer(item.key, item, value, cost_s=1.0, size=value.nbytes)
tier.flush()
"""


def test_a_writer_killed_mid_write_leaves_a_temp_file_that_is_never_read_and_later_removed(tmp_path):
    marker = tmp_path / "writing"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER_APP, str(tmp_path), str(marker)])
    deadline = time.time() + 60
    while not marker.exists() and writer.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert marker.exists()

    host = HostTier(max_bytes=1 << 20, durable=durable_tier(tmp_path))
    [temp] = os.listdir(host.durable.folder)
    assert temp.startswith(ITEM.key + ".") and temp.endswith(".tmp")
    got = host.get_or_compute(ITEM.key, lambda: np.arange(100_000.0), item=ITEM, durable=True)
    np.testing.assert_array_equal(got, np.arange(100_000.0))
    host.durable.flush()
    assert host.stats()["durable_misses"] == 1 and host.stats()["durable_writes"] == 1
    assert temp in os.listdir(host.durable.folder)  # young: it could be a live writer's

    old = time.time() - 2 * durable_module.ORPHAN_AGE_S
    os.utime(os.path.join(host.durable.folder, temp), (old, old))
    written(host.durable, np.arange(10.0), item=OTHER_ITEM)
    assert sorted(os.listdir(host.durable.folder)) == sorted([ITEM.key, OTHER_ITEM.key])
    assert host.stats()["durable_orphans_removed"] == 1


# --- broken, foreign and planted files ----------------------------------------------------------

def rewritten(path, key, **changes):
    """Writes the entry at ``path`` again, whole and checksummed, with its manifest changed."""
    with open(path, "rb") as f:
        manifest, fmt, payload = durable_module._parsed(f.read(), key)
    text = json.dumps({**manifest, **changes}).encode()
    temp, _ = write_entry_file(os.path.dirname(path), key, read_payload(fmt, payload), fmt, magic=durable_module.MAGIC,
                               prefix=len(text).to_bytes(durable_module.MANIFEST_LENGTH_BYTES, "little") + text)
    os.replace(temp, path)


def truncated(path):
    os.truncate(path, os.path.getsize(path) // 2)


def payload_flipped(path):
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))


def another_version(path):
    with open(path, "r+b") as f:
        f.seek(6)
        f.write(bytes([durable_module.MAGIC[6], durable_module.MAGIC[7] + 1]))


def owner_field(path):
    rewritten(path, ITEM.key, owner=os.getuid() + 4242)


def another_lineage(path):
    rewritten(path, ITEM.key, lineage=OTHER_ITEM.identity().hex())


def another_owner(path):
    os.chown(path, os.getuid() + 4242, -1)


@pytest.mark.parametrize("damage, counter, removed", [
    (truncated, "durable_corrupt", True),
    (payload_flipped, "durable_corrupt", True),
    (another_version, "durable_corrupt", True),
    (owner_field, "durable_corrupt", True),
    (another_lineage, "durable_foreign", False),
    pytest.param(another_owner, "durable_foreign", False,
                 marks=pytest.mark.skipif(os.getuid() != 0, reason="planting another user's file needs root")),
], ids=lambda p: getattr(p, "__name__", None))
def test_a_bad_file_is_never_served_and_is_counted(tmp_path, damage, counter, removed):
    value = np.arange(1000.0)
    path = written(durable_tier(tmp_path), value)
    damage(path)
    reader = HostTier(max_bytes=1 << 20, durable=durable_tier(tmp_path))  # another process
    computed = []
    got = reader.get_or_compute(ITEM.key, lambda: computed.append(1) or np.arange(1000.0), item=ITEM, durable=True)
    np.testing.assert_array_equal(got, value)
    reader.durable.flush()
    stats = reader.stats()
    assert computed == [1] and stats["durable_hits"] == 0 and stats[counter] == 1
    # A file of ours that is broken is replaced by the reader's own write; another's is left alone.
    assert stats["durable_writes"] == (1 if removed else 0) and os.path.exists(path)
    third = durable_tier(tmp_path).read(ITEM.key, ITEM)
    assert (third is not None) == removed


def test_a_file_of_another_user_is_read_when_users_share(tmp_path):
    if os.getuid() != 0:
        pytest.skip("planting another user's file needs root")
    value = np.arange(1000.0)
    path = written(durable_tier(tmp_path, shared=True), value)
    assert path.startswith(os.path.join(str(tmp_path), "shared", "driver"))
    another_owner(path)
    got, _ = durable_tier(tmp_path, shared=True).read(ITEM.key, ITEM)
    np.testing.assert_array_equal(got, value)


# --- budget, visibility, settings ----------------------------------------------------------------

def test_writes_beyond_the_budget_evict_the_lowest_score_first(tmp_path):
    value_bytes = 10_000 * 8
    tier = durable_tier(tmp_path, max_bytes=3 * value_bytes + 3 * 1024)  # three entries and their headers
    items = [LineageItem("test", literals=(("int", str(i)),)) for i in range(5)]
    for i, cost in enumerate((2.0, 1.0, 3.0, 4.0)):
        written(tier, np.full(10_000, float(i)), item=items[i], cost_s=cost)
    stats = tier.stats()
    assert sorted(os.listdir(tier.folder)) == sorted(items[i].key for i in (0, 2, 3))  # cost 1 left
    assert stats["durable_evicted"] == 1 and stats["bytes_held_durable"] <= tier.max_bytes
    written(tier, np.full(10_000, 4.0), item=items[4], cost_s=0.5)  # worth less than all it would evict
    assert tier.stats()["durable_refused"] == 1 and not os.path.exists(os.path.join(tier.folder, items[4].key))
    assert tier.stats()["bytes_held_durable"] <= tier.max_bytes


def test_durable_entries_are_listed_private_and_cleared_only_when_asked(durable_folder):
    X = memphis.array(np.random.default_rng(1).standard_normal((300, 20)))
    gram = (X.T @ X).numpy()
    memphis.local.tier().durable.flush()
    rows = memphis.local.entries()
    rows = rows[rows["tier"] == "durable"]
    assert len(rows) >= 1 and (rows["age_s"] >= 0).all()
    for path, size in zip(rows["path"], rows["size_bytes"]):
        assert os.path.getsize(path) == size and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    folder = os.path.dirname(rows["path"].iloc[0])
    assert folder == os.path.join(durable_folder, durable_module.user_folder(durable_module.user_name()), "driver")
    assert stat.S_IMODE(os.stat(folder).st_mode) == stat.S_IMODE(os.stat(os.path.dirname(folder)).st_mode) == 0o700

    memphis.local.clear()
    assert len(os.listdir(folder)) == len(rows)  # the host tier cleared, the durable files kept
    np.testing.assert_array_equal((X.T @ X).numpy(), gram)
    assert memphis.local.stats()["durable_hits"] == 1
    memphis.local.clear(durable=True)
    assert os.listdir(folder) == [] and memphis.local.stats()["bytes_held_durable"] == 0


def test_the_durable_tier_is_off_in_tests_and_where_asked(tmp_path, monkeypatch):
    assert os.environ["MEMPHIS_DURABLE"] == "off"  # conftest: no test shares results through it
    assert memphis.local.configure().durable is None
    assert memphis.local.configure(durable_dir=str(tmp_path), durable_max_bytes=0).durable is None
    try:
        assert memphis.local.configure(durable_dir=str(tmp_path)).durable.folder.startswith(str(tmp_path))
    finally:
        memphis.local.configure()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert config.durable_root("auto") == str(tmp_path / "cache" / "memphis" / "durable")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the XDG spec says
    assert config.durable_root(" AUTO ") == os.path.join(os.path.expanduser("~"), ".cache", "memphis", "durable")
    # Off, as on the JVM; a local path or file: URI is the folder; another filesystem holds Spark results only.
    assert config.durable_root("none") is config.durable_root("") is None
    assert config.durable_root(f"file://{tmp_path}") == str(tmp_path)
    assert config.durable_root("s3a://bucket/memphis") is None
    assert memphis.local.configure(durable_dir="none").durable is None
    with pytest.raises(ValueError, match="durable_max_bytes='lots'"):
        memphis.local.configure(durable_max_bytes="lots")


def test_a_forked_child_writes_with_a_writer_of_its_own(tmp_path):
    tier = durable_tier(tmp_path)
    written(tier, np.arange(10.0))  # the parent's writer thread exists now
    child = os.fork()
    if child == 0:  # the child: its write must run and its flush return
        try:
            written(tier, np.arange(20.0), item=OTHER_ITEM)
        finally:
            os._exit(0)
    deadline = time.time() + 30
    while os.waitpid(child, os.WNOHANG) == (0, 0):
        if time.time() > deadline:  # its write never ran: flush waits for ever
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child's write did not run")
        time.sleep(0.05)
    got, _ = durable_tier(tmp_path).read(OTHER_ITEM.key, OTHER_ITEM)
    np.testing.assert_array_equal(got, np.arange(20.0))


def test_a_masked_array_is_not_written_since_a_file_would_lose_its_mask(tmp_path):
    tier = durable_tier(tmp_path)
    value = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    tier.offer(ITEM.key, ITEM, value, cost_s=1.0, size=value.nbytes)
    tier.flush()
    assert tier.stats()["durable_refused"] == 1 and tier.read(ITEM.key, ITEM) is None
