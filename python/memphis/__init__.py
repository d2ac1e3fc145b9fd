"""memphis: lineage-based reuse and memory management for ML pipelines on Apache Spark.

Turn it on with :func:`configure_spark` (or :func:`session` for a local session); read what it
did with :func:`stats` or ``SELECT * FROM memphis_stats()``.
"""
from memphis.spark.jvm import EXTENSION_CLASS, jar_path
from memphis._version import __version__
from memphis.spark.concurrent import ActionFailed, RunAllError, run_all
from memphis.errors import MemphisConfigError, MemphisSetupError
from memphis.spark.keys import explain_key, lineage_key
from memphis.local import array, broadcast, collect, reuse
from memphis.spark.session import clear, configure_spark, entries, session, stats
# memphis.sklearn.memory(), scikit-learn's memory= (it imports no scikit-learn). Not in __all__: a
# star import must not shadow a user's ``import sklearn``.
from memphis import sklearn  # noqa: F401

__all__ = [
    "ActionFailed",
    "EXTENSION_CLASS",
    "MemphisConfigError",
    "MemphisSetupError",
    "RunAllError",
    "__version__",
    "array",
    "broadcast",
    "clear",
    "collect",
    "configure_spark",
    "entries",
    "explain_key",
    "jar_path",
    "lineage_key",
    "reuse",
    "run_all",
    "session",
    "stats",
]
