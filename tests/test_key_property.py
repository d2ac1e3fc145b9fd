"""Lineage keys over TPC-H's 22 and TPC-DS' 99 queries (benchmarks/tpch_corpus.py, tpcds_corpus.py): each
query reads fingerprinted Parquet and nothing non-deterministic, so each must have a key; the same at
every analysis and in every JVM, and another when a literal changes. That the key serves the query's next
identical ask is checked by the corpora's own runs (tests/test_tpch_corpus.py, test_tpcds_corpus.py: the
re-run of a query whose rows were kept runs no job). A property's test lists every query that fails it,
with memphis' reason, and then asserts: one failure does not hide the others."""
import json
import re
from collections import namedtuple
from datetime import date, timedelta
from decimal import Decimal

import pytest

import memphis
import tpch_corpus
from conftest import BENCHMARKS, TEST_CONFS, run_python
from tpcds_corpus import TPCDS

pytestmark = pytest.mark.slow  # every query is analyzed in two JVMs: about a minute

CORPORA = (tpch_corpus.TPCH, TPCDS)
# The corpus tests' scales (tests/test_tpch_corpus.py, test_tpcds_corpus.py), so that the data is generated once.
SCALES = {tpch_corpus.TPCH.name: 0.1, TPCDS.name: 0.05}
# A literal compared (=, <>, <, >, <=, >=, BETWEEN, LIKE, the first of an IN list): a number, a string, a
# date's string in a cast.
COMPARED_LITERAL = re.compile(r"(?:<=|>=|<>|!=|=|<|>|\bBETWEEN|\bLIKE|\bIN\s*\()\s*(?:CAST\s*\(\s*|DATE\s*)?"
                              r"(?P<literal>'[^']*'|\d+(?:\.\d+)?\b(?!\.))", re.IGNORECASE)
# The queries that compare no literal, so the rule changes none: TPC-DS Q76 compares columns only (IS NULL,
# join conditions).
NO_COMPARED_LITERAL = ["TPC-DS Q76"]

# A query of a corpus ("TPC-DS Q14"), the session of its corpus, and two analyses of it with their keys.
Query = namedtuple("Query", "spark text first second keys")

KEYS_APP = """
import json, sys
sys.path.insert(0, sys.argv[1])
import memphis
import tpch_corpus
from tpcds_corpus import TPCDS

spark, scales, found = memphis.session("local[2]", **json.loads(sys.argv[2])), json.loads(sys.argv[3]), {}
for corpus in (tpch_corpus.TPCH, TPCDS):
    session = spark.newSession()
    tpch_corpus.register(session, tpch_corpus.generate(scales[corpus.name], corpus=corpus), corpus)
    for number, text in tpch_corpus.queries(corpus).items():
        df = session.sql(text)
        found[f"{corpus.name} Q{number}"] = [memphis.lineage_key(df), memphis.explain_key(df)]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def queries():
    """Every query of both corpora, each analyzed twice in its corpus' session: a new session of the shared
    test session per corpus, as both have a table named customer (and none of the runtime settings other
    tests leave on the shared one)."""
    spark = memphis.session("local[2]", app_name="memphis-tests", **TEST_CONFS)
    found = {}
    for corpus in CORPORA:
        session = spark.newSession()
        tpch_corpus.register(session, tpch_corpus.generate(SCALES[corpus.name], corpus=corpus), corpus)
        for number, text in tpch_corpus.queries(corpus).items():
            first, second = session.sql(text), session.sql(text)
            found[f"{corpus.name} Q{number}"] = Query(session, text, first, second,
                                                      (memphis.lineage_key(first), memphis.lineage_key(second)))
    return found


def keyed(queries) -> dict:
    """The queries whose first analysis has a key."""
    return {name: q for name, q in queries.items() if q.keys[0] is not None}


def stable(queries) -> dict:
    """The queries with one key at both analyses."""
    return {name: q for name, q in keyed(queries).items() if q.keys[0] == q.keys[1]}


def first_difference(a: str, b: str, context: int = 80) -> str:
    """Where two explain_key texts first differ below their first lines (the keys, or why there is none): the
    canonical form's text around the first differing character in each; else their first lines."""
    for x, y in zip(a.splitlines()[1:], b.splitlines()[1:]):
        if x != y:
            at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            start = max(0, at - context)
            return f"…{x[start:at + context]}… against …{y[start:at + context]}…"
    return f"{a.splitlines()[0]} against {b.splitlines()[0]}"


def changed_literal(text: str):
    """``text`` with its first compared literal changed, or None when it compares none: a number up by one in
    its last digit (``24`` to ``25``, ``0.05`` to ``0.06``), a date a day later, another string one ``x`` longer."""
    match = COMPARED_LITERAL.search(text)
    if match is None:
        return None
    literal = match.group("literal")
    if literal.startswith("'"):
        inner = literal[1:-1]
        changed = ((date.fromisoformat(inner) + timedelta(days=1)).isoformat()
                   if re.fullmatch(r"\d{4}-\d{2}-\d{2}", inner) else inner + "x")
        changed = f"'{changed}'"
    else:
        number = Decimal(literal)
        changed = str(number + Decimal(1).scaleb(number.as_tuple().exponent))
    return text[:match.start("literal")] + changed + text[match.end("literal"):]


def failing(property_: str, failures: dict) -> str:
    """The table a property's failed assertion shows: each failing query with its reason."""
    return f"{len(failures)} queries {property_}:\n" + "\n".join(f"  {name}: {why}" for name, why in failures.items())


def test_every_query_has_a_key(queries):
    failures = {name: memphis.explain_key(q.first) for name, q in queries.items() if q.keys[0] is None}
    assert not failures, failing("have no key (memphis' reason)", failures)


def test_two_analyses_in_one_jvm_key_equal(queries):
    failures = {name: first_difference(memphis.explain_key(q.first), memphis.explain_key(q.second))
                for name, q in queries.items() if q.keys[0] != q.keys[1]}
    assert not failures, failing("key apart at two analyses (where explain_key first differs)", failures)


def test_two_jvms_key_equal(queries):
    there = run_python(KEYS_APP, BENCHMARKS, json.dumps(TEST_CONFS), json.dumps(SCALES))
    failures = {}
    for name, q in keyed(queries).items():
        key, explained = there[name]
        if key != q.keys[0]:
            failures[name] = ("apart at two analyses in one JVM too" if q.keys[0] != q.keys[1] else
                              first_difference(memphis.explain_key(q.first), explained))
    assert not failures, failing("key apart in another JVM (where explain_key first differs)", failures)


def test_a_changed_literal_changes_the_key(queries):
    """Over the queries with one key at both analyses (another key at each analysis would pass it for nothing)."""
    failures = {}
    for name, q in stable(queries).items():
        changed = changed_literal(q.text)
        key = None if changed is None else memphis.lineage_key(q.spark.sql(changed))
        if changed is not None and (key is None or key == q.keys[0]):
            failures[name] = f"the changed query's key: {key}"
    unchanged = [name for name, q in queries.items() if changed_literal(q.text) is None]
    assert unchanged == NO_COMPARED_LITERAL, f"the queries that compare no literal: {unchanged}"
    assert not failures, failing("keep their key when a compared literal changes", failures)
