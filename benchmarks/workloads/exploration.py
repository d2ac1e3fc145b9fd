"""Feature exploration: related DataFrame queries sharing a per-customer aggregate (the demo's session)."""
from memphis.demo import exploration_workload as workload

__all__ = ["workload"]
