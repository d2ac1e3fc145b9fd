"""Independent Spark actions submitted together, ordered so that what they share is computed once."""
import concurrent.futures
import logging
from collections import defaultdict
from dataclasses import dataclass

from memphis.spark import background, jvm_access

log = logging.getLogger("memphis")


@dataclass(frozen=True)
class ActionFailed:
    """The slot of an action of :func:`run_all` that raised: its position and what it raised."""

    index: int
    exception: BaseException


class RunAllError(Exception):
    """Raised by :func:`run_all` after every action ended when at least one failed.

    ``results`` holds one slot per action, in input order: the result of each action that
    succeeded and an :class:`ActionFailed` for each that raised; ``failures`` the latter alone.
    The first failure is the exception's cause.
    """

    def __init__(self, results: list):
        self.results = results
        self.failures = [r for r in results if isinstance(r, ActionFailed)]
        first = self.failures[0]
        super().__init__(f"{len(self.failures)} of {len(results)} actions failed; "
                         f"action {first.index} raised {first.exception!r}")


def run_all(actions, *, max_parallel: int = None, pool: str = "memphis") -> list:
    """Runs independent actions concurrently and returns their results in input order.

    Each action is a DataFrame (its action is ``df.collect()``) or a zero-argument callable.
    Before anything runs, memphis asks the JVM for the lineage keys of the DataFrames' expensive
    subplans (aggregates, joins, windows, sorts, Python UDFs, …) and persists each subplan that two
    or more of them share (``persisted`` in :func:`memphis.stats`, reason "shared by N actions of
    run_all"; a shared subplan inside a larger one shared by the same actions is left to that one).
    Spark fills it in the first job that reads it; jobs reading it meanwhile wait for its stages
    instead of computing them again. Submission follows MEMPHIS's max-parallelize order: one
    action of each shared group first, then the other DataFrame actions, then plain callables
    (driver-side work), so that with fewer threads than actions the shared work starts first.

    Every action runs in its own thread with the caller's Spark local properties (job group,
    description) and ``spark.scheduler.pool`` set to ``pool``. Pools share the cluster fairly
    only when the session started with ``spark.scheduler.mode=FAIR``; without it the jobs still
    run concurrently, in FIFO order of submission.

    Parameters
    ----------
    actions : iterable of DataFrames or zero-argument callables
    max_parallel : how many actions run at once; by default all of them.
    pool : the FAIR scheduler pool of the actions' jobs; ``None`` leaves the caller's.

    Returns
    -------
    list
        The actions' results (a list of Rows for a DataFrame), in input order.

    Raises
    ------
    RunAllError
        After all actions ended, when any raised; it carries every result and failure.

    Examples
    --------
    >>> base = spark.range(10**6).groupBy((F.col("id") % 100).alias("k")).count()  # doctest: +SKIP
    >>> small, big, total = memphis.run_all([
    ...     base.filter("count < 10000"), base.filter("count >= 10000"),
    ...     lambda: base.count()])  # doctest: +SKIP
    >>> try:  # doctest: +SKIP
    ...     results = memphis.run_all([base, lambda: 1 / 0])
    ... except memphis.RunAllError as e:
    ...     results = e.results  # [rows of base, ActionFailed(index=1, exception=ZeroDivisionError(...))]
    """
    if isinstance(actions, (str, bytes)) or not hasattr(actions, "__iter__"):
        raise TypeError(f"actions={actions!r}: expected an iterable of DataFrames or zero-argument callables")
    actions = list(actions)
    for i, action in enumerate(actions):
        if not (jvm_access.is_dataframe(action) or callable(action)):
            raise TypeError(f"actions[{i}]={action!r}: expected a DataFrame or a zero-argument callable")
    if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int)
                                     or max_parallel < 1):
        raise ValueError(f"max_parallel={max_parallel!r}: expected a positive whole number, or None for all")
    if pool is not None and not isinstance(pool, str):
        raise TypeError(f"pool={pool!r}: expected the name of a scheduler pool (a string), or None")
    if not actions:
        return []
    frames = {i: a for i, a in enumerate(actions) if jvm_access.is_dataframe(a)}
    heads = _persist_shared(frames)
    order = heads + [i for i in frames if i not in heads] + [i for i in range(len(actions)) if i not in frames]
    results = [None] * len(actions)
    properties = background.local_properties()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max_parallel or len(actions),
                                               thread_name_prefix="memphis-run-all") as executor:
        futures = {executor.submit(_run, actions[i], properties, pool): i for i in order}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            try:
                results[i] = future.result()
            except Exception as error:  # kept in its slot: the other actions' results stay
                log.debug("run_all: action %d failed: %r", i, error)
                results[i] = ActionFailed(index=i, exception=error)
    failures = [r for r in results if isinstance(r, ActionFailed)]
    if failures:
        raise RunAllError(results) from failures[0].exception
    return results


def _persist_shared(frames: dict) -> list:
    """Persists the subplans shared by two or more of ``frames`` ({index: DataFrame}); returns the
    first action of each shared group, in input order."""
    if len(frames) < 2:
        return []
    access = jvm_access.of(next(iter(frames.values())))
    sharers = defaultdict(set)  # subplan key -> indices of the actions that read it
    within = {}  # subplan key -> keys of the subplans that contain it
    for i, df in frames.items():
        for subplan in access.subplans(df):
            sharers[subplan["key"]].add(i)
            within[subplan["key"]] = subplan["within"]
    shared = {key: readers for key, readers in sharers.items() if len(readers) >= 2}
    # The job that fills an outer shared subplan computes the inner one inside it: persisting the
    # inner one too would only hold its data twice, unless more actions share it than the outer.
    outermost = {key: readers for key, readers in shared.items()
                 if not any(shared.get(outer) == readers for outer in within[key])}
    heads = set()
    for key, readers in outermost.items():
        first = min(readers)
        reason = f"shared by {len(readers)} actions of run_all"
        if access.persist_shared(frames[first], key, reason):
            heads.add(first)
            log.debug("run_all: persisted %s ahead (%s)", key, reason)
    return sorted(heads)


def _run(action, properties, pool):
    sc = background.adopt(properties)
    if sc is not None and pool is not None:
        sc.setLocalProperty("spark.scheduler.pool", pool)
    return action.collect() if jvm_access.is_dataframe(action) else action()
