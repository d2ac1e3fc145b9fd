"""Who may read what on the driver side: private spill files, no pickle, paths from keys only, and no
value served on a hash collision."""
import importlib
import os
import pickle
import stat

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import memphis
import memphis.local as ml
from memphis.spark import broadcasts
from memphis.tracing import lineage
from memphis.tiers.disk import DiskTier
from memphis.tiers.host import HostTier, State


def key(i):
    return f"{i:032x}"


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def spill(tier, i, value):
    """Puts ``value`` under key ``i`` and pushes it out to disk with a value of the whole budget."""
    tier.get_or_compute(key(i), lambda: value, cost_hint=10.0)
    tier.get_or_compute(key(10_000 + i), lambda: np.zeros(tier.max_bytes // 8), cost_hint=10.0)
    assert tier.state_of(key(i)) is State.SPILLED


def test_spill_directories_and_files_are_private_whatever_the_umask(tmp_path):
    root = tmp_path / "spill"
    old = os.umask(0)  # the most permissive: what memphis makes must still be private
    try:
        tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(root), max_bytes=1 << 20))
        spill(tier, 1, np.arange(1000.0))
    finally:
        os.umask(old)
    path = tier.disk.path_of(key(1))
    assert (mode(root), mode(os.path.dirname(path)), mode(path)) == (0o700, 0o700, 0o600)
    assert os.path.dirname(os.path.dirname(path)) == str(root)


def test_an_existing_root_is_made_private(tmp_path):
    root = tmp_path / "shared"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(root), max_bytes=1 << 20))
    spill(tier, 1, np.arange(1000.0))
    assert mode(root) == 0o700


def test_a_root_that_is_a_link_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(link), max_bytes=1 << 20))
    tier.get_or_compute(key(1), lambda: np.arange(1000.0), cost_hint=10.0)
    tier.get_or_compute(key(2), lambda: np.arange(1000.0), cost_hint=10.0)
    assert tier.state_of(key(1)) is None and tier.stats()["spill_failed"] == 1
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("hostile", ["../../escape", "/etc/passwd", "0" * 31 + "/", "..", "0" * 32 + "/../x",
                                     "A" * 32, "0" * 32 + "\n", ""])
def test_a_hostile_key_cannot_name_a_file_outside_the_directory(tmp_path, hostile):
    root = tmp_path / "spill"
    disk = DiskTier(root=str(root), max_bytes=1 << 20)
    assert disk.write(hostile, np.arange(10.0), score=1.0) == (False, [])
    assert disk.failed_writes == 1 and disk.read(hostile) is None
    tier = HostTier(max_bytes=10_000, disk=disk)
    np.testing.assert_array_equal(tier.get_or_compute(hostile, lambda: np.arange(1000.0), cost_hint=10.0),
                                  np.arange(1000.0))
    tier.get_or_compute(key(2), lambda: np.zeros(1250), cost_hint=10.0)  # pushes the hostile one out
    assert tier.state_of(hostile) is None  # not spilled: dropped
    everything = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")}
    assert everything == {"spill", f"spill/{os.path.basename(disk.directory)}"}  # no file anywhere


def test_spill_files_are_never_unpickled(tmp_path, monkeypatch):
    def no_pickle(*args, **kwargs):
        raise AssertionError("pickle used on a spill file")
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_pickle)
    values = [np.arange(1000.0), (np.arange(3), np.eye(2)), pa.table({"a": [1, None]}),
              pd.DataFrame({"a": [1.5, 2.5], "b": ["x", "y"]})]
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path), max_bytes=1 << 20))
    for i, value in enumerate(values):
        spill(tier, i, value)
        got = tier.get_or_compute(key(i), lambda: pytest.fail("recomputed"))
        assert tier.stats()["reloaded"] == i + 1
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(got, value)
        elif isinstance(value, pa.Table):
            assert got.equals(value)
        else:
            assert repr(got) == repr(value)


def test_a_spill_file_holding_pickled_objects_is_refused(tmp_path):
    """Even with a valid header and checksum (someone who can write the directory), an object array
    is not loaded: numpy refuses pickles, and memphis recomputes."""
    import io

    import xxhash

    from memphis.tiers.disk import MAGIC

    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path), max_bytes=1 << 20))
    spill(tier, 1, np.arange(1000.0))
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    payload = buffer.getvalue()
    header = (MAGIC + b"npy".ljust(8) + len(payload).to_bytes(8, "little") + bytes.fromhex(key(1))
              + xxhash.xxh3_128_digest(payload))
    with open(tier.disk.path_of(key(1)), "wb") as f:
        f.write(header + payload)
    got = tier.get_or_compute(key(1), lambda: np.arange(1000.0))
    np.testing.assert_array_equal(got, np.arange(1000.0))
    assert tier.stats()["corrupt"] == 1


def colliding(monkeypatch, module):
    """Makes every LineageItem that ``module`` builds have one and the same hash."""
    real = lineage.LineageItem

    def same_hash(opcode, **kwargs):
        return real(opcode, **{**kwargs, "digest": b"\x42" * 16})
    monkeypatch.setattr(module, "LineageItem", same_hash)


def test_a_hash_collision_of_reused_calls_serves_no_wrong_value(local_tier, monkeypatch):
    colliding(monkeypatch, importlib.import_module("memphis.tracing.reuse"))  # the module, not memphis.reuse

    @memphis.reuse
    def double(x):
        return x * 2

    a, b = np.arange(3.0), np.arange(3.0) + 10
    np.testing.assert_array_equal(double(a), a * 2)
    np.testing.assert_array_equal(double(b), b * 2)  # same key as double(a): refused, computed
    np.testing.assert_array_equal(double(a), a * 2)  # the cached one still serves its own lineage
    assert ml.stats()["refused"] == 1 and ml.stats()["hits"] == 1


def test_a_hash_collision_of_broadcasts_serves_no_wrong_value(spark, monkeypatch):
    memphis.clear(spark)
    colliding(monkeypatch, broadcasts)
    first = memphis.broadcast(spark, np.arange(4.0))
    before = memphis.stats(spark)
    other = memphis.broadcast(spark, np.arange(4.0) + 100)  # same key, another lineage
    assert other._jbroadcast.id() != first._jbroadcast.id()
    assert spark.sparkContext.parallelize([0]).map(lambda _: float(other.value.sum())).collect() == [406.0]
    again = memphis.broadcast(spark, np.arange(4.0))
    assert again._jbroadcast.id() == first._jbroadcast.id()  # the held one still serves its own lineage
    after = memphis.stats(spark)
    assert after["local_broadcasts_refused"] - before["local_broadcasts_refused"] == 1
    assert after["local_broadcast_hits"] - before["local_broadcast_hits"] == 1
    memphis.clear(spark)
