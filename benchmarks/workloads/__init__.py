"""Benchmark workloads. Each module defines ``workload(directory) -> harness.Workload``;
``directory`` is a scratch folder for the data it generates. Add a module, then list it here."""
from workloads import exploration, kmeans, no_reuse, notebook_rerun, tpch_exploration, tpch_session

ALL = {"exploration": exploration.workload, "tpch_exploration": tpch_exploration.workload,
       "tpch_session": tpch_session.workload, "no_reuse": no_reuse.workload,
       "notebook_rerun": notebook_rerun.workload, "kmeans": kmeans.workload}
