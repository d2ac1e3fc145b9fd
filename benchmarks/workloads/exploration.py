"""Feature exploration: related DataFrame queries sharing a per-customer aggregate (the demo's session).

The expert caches that aggregate by hand, the one DataFrame four of the five queries read, and
unpersists it after; the queries build the same plan, which Spark's cache then serves."""
import os

from harness import Workload
from memphis.demo import explore, sales_and_customers, write_sales
from workloads.tpch_exploration import cached_by_hand


def expert(spark, path):
    with cached_by_hand(spark, [sales_and_customers(spark, path)[1]]):
        return explore(spark, path)


def workload(directory):
    return Workload(
        name="exploration",
        description="five related queries over one per-customer aggregate of generated sales (Parquet)",
        prepare=lambda spark, scale: write_sales(spark, int(400_000 * scale), os.path.join(directory, "sales")),
        run=explore,
        naive=lambda spark, path: explore(spark, path, cache=lambda df: df.cache()),
        expert=expert,
    )
