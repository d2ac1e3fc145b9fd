"""The driver tiers: host memory, disk and GPU memory under budgets, keyed by lineage, sharing one
core (tiers/core.py); a Runtime (tiers/runtime.py) holds one cache's tiers."""
