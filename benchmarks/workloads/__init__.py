"""Benchmark workloads. Each module defines ``workload(directory) -> memphis.bench.Workload``;
``directory`` is a scratch folder for the data it generates. Add a module, then list it here."""
from workloads import exploration

ALL = {"exploration": exploration.workload}
