"""Property-based tests of the driver tiers' state machines (hypothesis, stateful): any sequence of
operations keeps only valid transitions, the budgets, right values and consistent counters."""
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memphis.gpu import GpuState, GpuTier, SimulatedDevice
from memphis.gpu import TRANSITIONS as GPU_TRANSITIONS
from memphis.tiers.disk import DiskTier
from memphis.tiers.host import TRANSITIONS, HostTier, State
from memphis.tracing.lineage import LineageItem

KEYS = 8
SIZES = [8 * (1 + (k * 37) % 250) for k in range(KEYS)]  # 8 .. 1784 bytes, fixed per key
# Cheap (dropped), dear below the spill floor, dear (spilled); mostly dear, so that spills come soon.
COSTS = st.sampled_from([1e-6, 1e-3, 10.0, 10.0, 10.0])
# Enough to explore the machines, bounded so that the file runs in a few seconds.
MACHINE_SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None)


def key(k):
    return f"{k:032x}"


def value(k):
    return np.full(SIZES[k] // 8, float(k))


def item(k, kind="leaf"):
    """The lineage of key ``k``; another ``kind`` has the same hash and another structure (a collision)."""
    return LineageItem(kind, literals=(("int", str(k)),), digest=bytes.fromhex(key(k)))


class Failure(Exception):
    pass


def recorded_moves(tier, transitions):
    """Wraps ``tier._move`` to record every (old, new) state pair; returns the list."""
    moves, original = [], tier._move

    def move(entry, state):
        assert state in transitions[entry.state], f"{entry.state} -> {state}"
        moves.append((entry.state, state))
        original(entry, state)
    tier._move = move
    return moves


class HostMachine(RuleBasedStateMachine):
    """The host tier with its disk tier; the model is what each key's value is and what ran."""

    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="memphis-hyp-")
        self.tier = HostTier(max_bytes=3_000, disk=DiskTier(root=self.root, max_bytes=5_000))
        self.moves = recorded_moves(self.tier, TRANSITIONS)
        self.computations = 0  # calls of a compute function, failed ones included
        self.failures = 0
        self.served = 0  # asks answered without computing (hits, reloads, found by peek)
        self.asks = 0  # get_or_compute calls that were not refused
        self.peeks_found = 0

    def teardown(self):
        self.tier.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def compute(self, k):
        self.computations += 1
        return value(k)

    @rule(k=st.integers(0, KEYS - 1), cost=COSTS)
    def get(self, k, cost):
        before = self.tier.state_of(key(k))
        computed = self.computations
        got = self.tier.get_or_compute(key(k), lambda: self.compute(k), item=item(k), cost_hint=cost)
        self.asks += 1
        assert np.array_equal(got, value(k)) and not got.flags.writeable
        if before is State.CACHED:
            assert self.computations == computed  # a hit never recomputes
        if self.computations == computed:
            self.served += 1

    @precondition(lambda self: self.spilled())
    @rule(data=st.data(), cost=COSTS)
    def reload(self, data, cost):
        """Asks for a spilled key (random sequences rarely would): read back from disk, not recomputed."""
        k = int(data.draw(st.sampled_from(self.spilled())), 16)
        computed = self.computations
        self.get(k, cost)
        assert self.computations == computed

    def spilled(self):
        return sorted(k for k, e in self.tier._entries.items() if e.state is State.SPILLED)

    @rule(k=st.integers(0, KEYS - 1), cost=COSTS)
    def put(self, k, cost):
        self.tier.put(key(k), value(k), item=item(k), cost_s=cost)

    @rule(k=st.integers(0, KEYS - 1))
    def fail(self, k):
        before = self.tier.state_of(key(k))

        def failing():
            self.computations += 1
            self.failures += 1
            raise Failure(k)
        try:
            got = self.tier.get_or_compute(key(k), failing, item=item(k))
        except Failure:
            assert self.tier.state_of(key(k)) is None  # nothing half-made stays
        else:
            assert before in (State.CACHED, State.SPILLED) and np.array_equal(got, value(k))
            self.served += 1
        self.asks += 1

    @precondition(lambda self: self.tier._entries)
    @rule(data=st.data())
    def collide(self, data):
        """Same hash, another lineage: the caller's own computation runs; the entry stays as it was."""
        victim = data.draw(st.sampled_from(sorted(self.tier._entries)))
        before = self.tier.state_of(victim)
        refused = self.tier.stats()["refused"]
        got = self.tier.get_or_compute(victim, lambda: "impostor", item=item(int(victim, 16), kind="impostor"))
        assert got == "impostor" and self.tier.state_of(victim) is before
        assert self.tier.stats()["refused"] == refused + 1

    @rule(k=st.integers(0, KEYS - 1))
    def peek(self, k):
        found = self.tier.peek(key(k), item=item(k))
        assert (found is not None) == (self.tier.state_of(key(k)) is State.CACHED)
        if found is not None:
            assert np.array_equal(found[0], value(k))
            self.served += 1
            self.peeks_found += 1

    @precondition(lambda self: self.spilled())
    @rule(data=st.data(), garbage=st.binary(min_size=1, max_size=16))
    def corrupt(self, data, garbage):
        """A spill file overwritten by someone else: detected on reload, recomputed."""
        victim = data.draw(st.sampled_from(self.spilled()))
        with open(self.tier.disk.path_of(victim), "r+b") as f:
            f.seek(data.draw(st.integers(0, os.path.getsize(f.name) - 1)))
            f.write(garbage)
        corrupt = self.tier.stats()["corrupt"]
        k = int(victim, 16)
        got = self.tier.get_or_compute(victim, lambda: self.compute(k), item=item(k))
        self.asks += 1
        assert np.array_equal(got, value(k))
        # An overwrite with the same bytes changes nothing; any other is caught by the checksum.
        assert self.tier.stats()["corrupt"] in (corrupt, corrupt + 1)
        if self.tier.stats()["corrupt"] == corrupt:
            self.served += 1

    @rule()
    def clear(self):
        self.tier.clear()
        assert self.tier.bytes_held == 0 and self.tier.disk.bytes_held == 0

    @invariant()
    def budgets_and_states(self):
        entries = self.tier._entries.values()
        assert all(e.state in (State.CACHED, State.SPILLED) for e in entries)  # no placeholder is left
        assert self.tier.bytes_held == sum(e.size for e in entries if e.state is State.CACHED)
        assert 0 <= self.tier.bytes_held <= self.tier.max_bytes
        disk = self.tier.disk
        assert disk.bytes_held == sum(size for _, size, _ in disk._files.values()) <= disk.max_bytes
        # A spilled entry has its file and every file belongs to a spilled entry: nothing leaks.
        assert set(disk._files) == {e.key for e in entries if e.state is State.SPILLED}
        assert all(os.path.getsize(path) == size for path, size, _ in disk._files.values())

    @invariant()
    def counters(self):
        stats = self.tier.stats()
        assert stats["hits"] + stats["misses"] == self.asks + self.peeks_found
        assert stats["misses"] == stats["computed"] + self.failures  # every miss computed, or failed
        assert stats["computed"] + self.failures == self.computations
        assert stats["hits"] == self.served
        assert stats["internal_errors"] == 0 and stats["spill_failed"] == 0
        assert all(new in TRANSITIONS[old] for old, new in self.moves)


class GpuMachine(RuleBasedStateMachine):
    """The GPU tier on the simulated device, above a small host tier (evictions go there or are dropped)."""

    BUDGET = 4_000  # below the sum of the values' sizes: evictions come soon

    def __init__(self):
        super().__init__()
        self.host = HostTier(max_bytes=3_000)
        self.device = SimulatedDevice(capacity_bytes=8_000)
        self.tier = GpuTier(device=self.device, budget_bytes=self.BUDGET, host=lambda: self.host)
        self.moves = recorded_moves(self.tier, GPU_TRANSITIONS)
        self.live = []  # device arrays the "user" still holds: their blocks cannot be recycled
        self.asks = 0
        self.failures = 0

    def teardown(self):
        self.live.clear()
        self.tier.close()

    # 0: recomputing beats a copy (dropped on eviction); 10 s: copied to the host tier.
    @rule(k=st.integers(0, KEYS - 1), delayed=st.booleans(), keep=st.booleans(), cost=st.sampled_from([0.0, 10.0]))
    def get(self, k, delayed, keep, cost):
        before = self.tier.state_of(key(k))

        def compute():
            return self.device.copy_to_device(value(k))  # one fresh device buffer
        got, held = self.tier.get_or_compute(key(k), compute, item=item(k), delayed=delayed)
        self.asks += 1
        assert np.array_equal(got.get(), value(k))
        assert held == (self.tier.state_of(key(k)) is GpuState.CACHED)
        if before is GpuState.CACHED:
            assert held
        if held:  # its measured cost is tiny; give it the drawn one so that evictions go both ways
            self.tier._entries[key(k)].cost_s = cost
        if keep and not self.live:  # one live array at most: a value and a new one always fit the budget
            self.live.append(got)

    @rule(k=st.integers(0, KEYS - 1))
    def fail(self, k):
        def failing():
            self.device.copy_to_device(value(k))  # allocated, then lost: its buffer must come back
            raise Failure(k)
        try:
            got, _ = self.tier.get_or_compute(key(k), failing, item=item(k), delayed=False)
        except Failure:
            self.failures += 1
            assert self.tier.state_of(key(k)) in (GpuState.SEEN, None)
        else:
            assert np.array_equal(got.get(), value(k))
        self.asks += 1

    @rule()
    def drop_live(self):
        self.live.clear()

    @rule()
    def release_free(self):
        self.tier.release_free()

    @rule()
    def clear(self):
        self.tier.clear()
        assert self.tier.bytes_held == 0

    @invariant()
    def budgets_and_states(self):
        entries = self.tier._entries.values()
        assert all(e.state is GpuState.CACHED for e in entries)  # no placeholder, no eviction in flight
        assert self.tier.bytes_held == sum(e.size for e in entries) <= self.BUDGET
        assert self.device.bytes_in_use == self.tier.budget.bytes_in_pool <= self.BUDGET  # the pool holds it all
        assert not set(self.tier._entries) & set(self.tier._history)  # SEEN or an entry, never both
        assert self.host.bytes_held <= self.host.max_bytes
        for k, entry in self.tier._entries.items():
            assert np.array_equal(entry.value._data, value(int(k, 16)))

    @invariant()
    def counters(self):
        stats = self.tier.stats()
        assert stats["gpu_hits"] + stats["gpu_misses"] == self.asks
        assert all(new in GPU_TRANSITIONS[old] for old, new in self.moves)


HostMachine.TestCase.settings = MACHINE_SETTINGS
GpuMachine.TestCase.settings = MACHINE_SETTINGS
test_host_tier_state_machine = HostMachine.TestCase
test_gpu_tier_state_machine = GpuMachine.TestCase


@pytest.mark.parametrize("machine", [HostMachine, GpuMachine])
def test_machines_reach_every_state(machine):
    """The machines above are not vacuous: two passes over the keys and a clear reach every state."""
    m = machine()
    extra = {} if machine is HostMachine else {"delayed": True, "keep": False}
    try:
        for _ in range(2):
            for k in range(KEYS):
                m.get(k=k, cost=10.0, **extra)
                m.get(k=k, cost=10.0, **extra)
        m.clear()
        states = {old for old, _ in m.moves} | {new for _, new in m.moves}
        # Entries are made in COMPUTING (GPU: remembered as SEEN) without a move from None.
        expected = set(TRANSITIONS) if machine is HostMachine else set(GPU_TRANSITIONS) - {None}
        assert states == expected
    finally:
        m.teardown()
