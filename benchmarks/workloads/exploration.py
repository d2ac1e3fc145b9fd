"""Feature exploration: related DataFrame queries sharing a per-customer aggregate (the demo's session).

The expert caches that aggregate by hand, the one DataFrame four of the five queries read, and
unpersists it after; the queries build the same plan, which Spark's cache then serves."""
import dataclasses

from memphis.demo import exploration_workload, explore, sales_and_customers
from workloads.tpch_exploration import cached_by_hand


def expert(spark, path):
    with cached_by_hand(spark, [sales_and_customers(spark, path)[1]]):
        return explore(spark, path)


def workload(directory):
    return dataclasses.replace(exploration_workload(directory), expert=expert)
