"""The memphis tab of the Spark UI, read as a user reads it: in a real headless browser (Debian's
chromium, which `make test` installs), live during a session that persisted, served and refused
subplans, and in pyspark's own History Server replaying that session's event log."""
import html.parser
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pyspark
import pytest

import memphis
from conftest import TEST_CONFS, eventually, per_key, sales, stop_spark
from memphis.spark.jvm import facade, jar_path, java_executable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the screenshots land, for a look after the run (build/ is not committed; docs/ has one copy).
ARTIFACTS = os.path.join(ROOT, "build", "test-artifacts")

# Rows of memphis_stats() that are measured each time they are read, not counted: the page shows the
# value of the last state memphis posted, memphis_stats() the value now.
GAUGES = {"driver_heap_used_bytes", "local_disk_budget_bytes"}


def browse(url, tmp_path, screenshot=None):
    """The DOM chromium builds for ``url`` (or a screenshot of it): what a user's browser shows."""
    chromium = shutil.which("chromium")
    assert chromium, "the browser tests need Debian's chromium: `make test` installs it (make browser)"
    # root in a container has no sandbox to drop into; the profile folder keeps runs apart.
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    if screenshot:
        os.makedirs(os.path.dirname(screenshot), exist_ok=True)
        args += [f"--screenshot={screenshot}", "--window-size=1400,1500", "--hide-scrollbars"]
    else:
        args += ["--dump-dom"]
    done = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Rows(html.parser.HTMLParser):
    """The page's tables as {table id: {row key: [cell texts]}}, rows keyed by their data-* attribute."""

    KEYS = ("data-stat", "data-key", "data-decision", "data-execution", "data-place")

    def __init__(self, page):
        super().__init__()
        self.tables, self.links = {}, []
        self._table = self._row = None
        self._cell = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id"), {})
        elif tag == "tr" and self._table is not None:
            key = next((attrs[k] for k in self.KEYS if k in attrs), None)
            self._row = self._table.setdefault(key, []) if key is not None else None
            if self._row is not None and self._row:  # decisions repeat: keep each row's cells apart
                self._row.append("|")
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None


def counters(page):
    return {name: int(cells[1]) for name, cells in Rows(page).tables["memphis-stats"].items()}


# A servlet filter that signs the request in as the user its `user` parameter names, as a site's
# authentication filter (Kerberos, OAuth) would; Spark's ACLs take the signed-in user from it. Spark 4's
# UI is on jakarta.servlet, 3.5's on javax.servlet.
USER_FILTER = """
import PACKAGE.*;
import PACKAGE.http.*;

public class UrlUserFilter implements Filter {
  public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
      throws java.io.IOException, ServletException {
    final String user = request.getParameter("user");
    chain.doFilter(user == null ? request : new HttpServletRequestWrapper((HttpServletRequest) request) {
      @Override public String getRemoteUser() { return user; }
    }, response);
  }
}
"""
# Who may read what, with Spark's UI ACLs on: the owner (the user running the tests) and an admin read an
# entry's plan; a user with view access sees the tab but no plan; any other user is turned away by Spark.
VIEWER, ADMIN, STRANGER = "daemon", "bin", "nobody"
ACLS = {"spark.acls.enable": "true", "spark.ui.view.acls": VIEWER, "spark.admin.acls": ADMIN}


def user_filter(folder):
    """The folder holding UrlUserFilter, compiled for this pyspark's servlet API and Java 11 and later."""
    jars = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars")
    package = "jakarta.servlet" if int(pyspark.__version__.split(".")[0]) >= 4 else "javax.servlet"
    api = os.pathsep.join(os.path.join(jars, j) for j in os.listdir(jars) if "servlet-api" in j)
    source = folder / "UrlUserFilter.java"
    source.write_text(USER_FILTER.replace("PACKAGE", package))
    javac = shutil.which("javac")
    assert javac, "the browser tests compile a servlet filter: they need a JDK's javac"
    subprocess.run([javac, "--release", "11", "-cp", api, "-d", str(folder), str(source)], check=True,
                   capture_output=True, timeout=120)
    return str(folder)


def driver_class_path(classes):
    """The session confs that put ``classes`` on the driver's class path: the JVM's class path when this
    process starts its JVM, else the running JVM's class loader (a JVM's class path is fixed at its start,
    and an earlier test module may have started it)."""
    from pyspark import SparkContext
    if SparkContext._gateway is None:
        return {"spark.driver.extraClassPath": classes}
    java = SparkContext._gateway.jvm
    java.java.lang.Thread.currentThread().getContextClassLoader().addURL(java.java.io.File(classes).toURI().toURL())
    return {}


def as_user(url, user):
    return f"{url}{'&' if '?' in url else '?'}user={user}"


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class App:
    """One application with the UI on, its ACLs on and an event log, that persisted, served and refused subplans."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.events = tmp_path / "events"
        self.events.mkdir()
        self.filter_classes = user_filter(tmp_path)
        self.spark = memphis.session("local[2]", app_name="memphis-ui-tests", **{
            **TEST_CONFS, "spark.ui.enabled": "true", "spark.ui.port": "0",
            "spark.ui.showConsoleProgress": "false", **ACLS,
            **driver_class_path(self.filter_classes), "spark.ui.filters": "UrlUserFilter",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(self.events)})
        # Port 0: Spark binds a free port itself. A port picked here could be taken by another test
        # worker's Spark UI before Spark binds it, and Spark would move on to the next one.
        self.port = int(self.spark.sparkContext.uiWebUrl.rsplit(":", 1)[1])
        self.app_id = self.spark.sparkContext.applicationId
        self.owner = self.spark.sparkContext.sparkUser()
        path = sales(self.spark, str(tmp_path / "sales"))
        self.key = memphis.lineage_key(per_key(self.spark, path))
        # The shared aggregate: seen, persisted on its second occurrence, served on the third.
        self.first_rows = len(per_key(self.spark, path).where("total > 0").collect())
        for threshold in (100, 200):
            per_key(self.spark, path).where(f"total > {threshold}").collect()
        # The first question again: answered from the rows it collected (a served subplan).
        self.served_rows = len(per_key(self.spark, path).where("total > 0").collect())
        # An unseeded random value: no key, refused with its reason.
        self.spark.read.parquet(path).selectExpr("k", "rand() AS r").groupBy("k").sum("r").collect()
        self._live = None

    def url(self, path, user=None):
        """An address of the live UI, signed in as ``user`` (the owner unless named)."""
        return as_user(f"http://127.0.0.1:{self.port}{path}", user or self.owner)

    def jvm_stats(self):
        """memphis_stats(), once Spark's listeners have seen every query (one py4j call, no query of its own)."""
        return json.loads(facade(self.spark).statsJson(self.spark._jsparkSession))

    def live(self):
        """The live tab's DOM once it shows the state memphis_stats() reports (its state event arrives
        on the listener bus a moment after the query's end)."""
        if self._live is None:
            url = self.url("/memphis/")
            expected = {k: v for k, v in self.jvm_stats().items() if k not in GAUGES}

            def shown():
                self._live = browse(url, self.tmp_path)
                return {k: v for k, v in counters(self._live).items() if k not in GAUGES} == expected
            assert eventually(shown, seconds=30), (counters(self._live), expected)
        return self._live

    def stop(self):
        stop_spark()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    stop_spark()  # another module's session (UI off) must not be the one reused here
    started = App(tmp_path_factory.mktemp("ui"))
    yield started
    started.stop()


def test_live_tab_shows_decisions_entries_and_the_counters_of_memphis_stats(app, tmp_path):
    page = app.live()
    tables = Rows(page).tables
    stats = app.jvm_stats()
    assert stats["persisted"] >= 1 and stats["hits"] >= 1 and stats["refused"] >= 1
    # Every memphis_stats() row is on the page, with its value (the gauges read at another moment).
    assert set(tables["memphis-stats"]) == set(stats)
    assert {k: v for k, v in counters(page).items() if k not in GAUGES} == \
        {k: v for k, v in stats.items() if k not in GAUGES}
    # The decisions, with their reasons.
    decisions = tables["memphis-decisions"]
    assert {"persisted", "hits", "refused"} <= set(decisions)
    assert "rand is non-deterministic" in " ".join(decisions["refused"])
    # The persisted aggregate's entry: its table and shape in words, its state and its hit.
    entry = tables["memphis-entries"][app.key]
    assert entry[1] == "sales" and entry[2].startswith("Aggregate") and entry[3] == "materialized"
    assert int(entry[6]) == 1
    # Places: Spark storage holds the entry's bytes, within its budget.
    assert "Spark storage" in tables["memphis-places"]
    # Per-query lines link to the SQL tab's executions, which exist.
    executions = sorted(int(e) for e in tables["memphis-queries"])
    assert executions and f"/SQL/execution/?id={executions[0]}" in Rows(page).links
    sql_page = browse(app.url(f"/SQL/execution/?id={executions[0]}"), tmp_path)
    assert f"Details for Query {executions[0]}" in sql_page
    shot = os.path.join(ARTIFACTS, "memphis-tab.png")
    browse(app.url("/memphis/"), tmp_path, screenshot=shot)
    assert os.path.getsize(shot) > 10_000  # a rendered page, not an empty image


def plans_shown(page, key):
    """The plan cell of entry ``key``, and every cell's text of the page: what a reader of it sees."""
    tables = Rows(page).tables
    return tables["memphis-entries"][key][-1], " ".join(" ".join(rows) for t in tables.values() for rows in t.values())


def assert_acls_hold(url_as, key, tmp_path):
    """With UI ACLs on, the owner and an admin read entry ``key``'s plan; a viewer sees that it exists; a stranger nothing."""
    owner_plan, _ = plans_shown(browse(url_as(None), tmp_path), key)
    admin_plan, _ = plans_shown(browse(url_as(ADMIN), tmp_path), key)
    # The cell: the summary "plan", then the plan text it unfolds.
    assert owner_plan.startswith("plan") and "Aggregate" in owner_plan and admin_plan == owner_plan
    viewer_plan, viewer_sees = plans_shown(browse(url_as(VIEWER), tmp_path), key)
    assert viewer_plan == "only its owner may read it"
    assert owner_plan[len("plan"):] not in viewer_sees
    assert http_status(url_as(STRANGER)) == 403


def test_with_ui_acls_on_only_the_owner_and_admins_read_an_entrys_plan(app, tmp_path):
    app.live()
    assert_acls_hold(lambda user: app.url("/memphis/", user), app.key, tmp_path)


def node_metrics(app, execution, node_name):
    """The SQL metrics of a node of an execution's plan, as the SQL tab shows them (Spark's REST API)."""
    url = app.url(f"/api/v1/applications/{app.app_id}/sql/{execution}?details=true")
    with urllib.request.urlopen(url, timeout=30) as r:
        nodes = json.load(r)["nodes"]
    [node] = [n for n in nodes if n["nodeName"] == node_name]
    return {m["name"]: m["value"] for m in node["metrics"]}


def executions_with(app, decision):
    """The SQL executions the live tab lists with ``decision`` among their decisions."""
    queries = Rows(app.live()).tables["memphis-queries"]
    return [int(e) for e, cells in queries.items() if decision in cells[1]]


def test_sql_tab_shows_what_memphis_served(app, tmp_path):
    served = executions_with(app, "results_reused")
    assert len(served) == 1
    metrics = node_metrics(app, served[0], "ServedByMemphis")
    assert int(metrics["rows served by memphis"].replace(",", "")) == app.served_rows
    assert "compute time saved" in metrics
    # And in the browser: the execution page's plan graph carries them.
    page = browse(app.url(f"/SQL/execution/?id={served[0]}"), tmp_path)
    assert "ServedByMemphis" in page and "rows served by memphis" in page
    shot = os.path.join(ARTIFACTS, "memphis-sql-metric.png")
    browse(app.url(f"/SQL/execution/?id={served[0]}"), tmp_path, screenshot=shot)
    assert os.path.getsize(shot) > 10_000


def test_sql_tab_shows_what_memphis_kept(app):
    # The first question: its shuffle kept for the second occurrence, its rows for a later question.
    [first] = executions_with(app, "shuffles_retained")
    assert node_metrics(app, first, "RetainShuffle")["shuffles kept by memphis"] == "1"
    assert int(node_metrics(app, first, "KeepResult")["rows kept by memphis"].replace(",", "")) == app.first_rows


@pytest.fixture(scope="module")
def history_server(app, tmp_path_factory):
    """pyspark's own History Server over the app's event log, the memphis jar on its classpath."""
    app.live()  # what the live tab showed, for the comparison
    app.stop()
    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    work = tmp_path_factory.mktemp("history")
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOG_DIR=str(work / "logs"), SPARK_PID_DIR=str(work / "pid"),
               SPARK_IDENT_STRING=f"memphis-tests-{os.getpid()}",
               SPARK_DAEMON_CLASSPATH=os.pathsep.join([jar_path(), app.filter_classes]),
               JAVA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(java_executable()))),
               SPARK_HISTORY_OPTS=f"-Dspark.history.fs.logDirectory=file:{app.events} "
                                  "-Dspark.history.ui.port=0 -Dspark.ui.host=127.0.0.1 "
                                  "-Dspark.ui.filters=UrlUserFilter -Dspark.history.ui.acls.enable=true")
    subprocess.run(["bash", os.path.join(home, "sbin", "start-history-server.sh")], env=env, check=True,
                   capture_output=True, timeout=60)
    log = next((work / "logs").glob("*.out"))

    def listed(url):
        try:
            with urllib.request.urlopen(f"{url}/api/v1/applications", timeout=5) as r:
                return any(a["id"] == app.app_id for a in json.load(r))
        except OSError:
            return False
    try:
        # The port it bound (0 above: its own pick, as for the live UI), from its log.
        assert eventually(lambda: "Bound HistoryServer" in log.read_text(), seconds=60), log.read_text()[-3000:]
        url = "http://127.0.0.1:" + re.search(r"Bound HistoryServer .*:(\d+)", log.read_text()).group(1)
        assert eventually(lambda: listed(url), seconds=60), log.read_text()[-3000:]
        yield url
    finally:
        subprocess.run(["bash", os.path.join(home, "sbin", "stop-history-server.sh")], env=env,
                       capture_output=True, timeout=60)


def test_history_server_replays_the_same_tab(app, history_server, tmp_path):
    live = Rows(app.live()).tables
    replayed_page = browse(as_user(f"{history_server}/history/{app.app_id}/memphis/", app.owner), tmp_path)
    replayed = Rows(replayed_page).tables
    # The same counters (gauges too: both pages show the last state the application posted), entries and decisions.
    assert replayed["memphis-stats"] == live["memphis-stats"]
    def but_age(entries):  # the age grows while the tab is read
        return {key: cells[:8] + cells[9:] for key, cells in entries.items()}
    assert but_age(replayed["memphis-entries"]) == but_age(live["memphis-entries"])
    assert replayed["memphis-decisions"] == live["memphis-decisions"]
    # Its links lead to the replayed application's SQL tab.
    assert any(link.startswith(f"/history/{app.app_id}/SQL/execution/?id=") for link in Rows(replayed_page).links)


def test_history_server_keeps_the_applications_ui_acls(app, history_server, tmp_path):
    # The History Server applies the application's own view and admin ACLs (spark.history.ui.acls.enable).
    tab = f"{history_server}/history/{app.app_id}/memphis/"
    assert_acls_hold(lambda user: as_user(tab, user or app.owner), app.key, tmp_path)
