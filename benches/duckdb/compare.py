#!/usr/bin/env python3
"""The formulation matrix's questions in DuckDB, beside tsbucket, in one sitting.

Generates the same data the `formulations` bench reads (devops 1000 hosts x 6 h, seed 004 at
scale 0.25, with the workloads' own seeds) as CSV through `tsbucket gen`, loads it into an
in-memory DuckDB, and times each question written as SQL (medians; each query's result is
materialised into a temporary table, so rows are built, not just counted). Then it runs the
`formulations` bench in the same sitting and prints, per question, DuckDB's time, tsbucket's
fastest and slowest forms that return `Document`s, DuckDB / tsbucket for both, and the form
that takes the documents as BSON bytes where the question has one.

Needs the `duckdb` Python package (`pip install duckdb`). From the repository's top:

    python3 benches/duckdb/compare.py --work /tmp/compare --runs 5

`--work` keeps the CSV files and tsbucket's database between runs.
"""

import argparse
import datetime as dt
import os
import re
import statistics
import subprocess
import sys
import time

FIELDS = ["usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait",
          "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"]
HOSTS = 1000
HOURS = 6.0
START = dt.datetime(2016, 1, 1, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


def hosts(n):
    """The hosts `workload/src/formulations.rs` picks for `n` hosts."""
    return [f"host_{(i * HOSTS // n + HOSTS // 2) % HOSTS}" for i in range(n)]


def window(hours):
    """The window of `hours` ending 7 minutes before the data's end, as the matrix has it."""
    end = START + dt.timedelta(hours=HOURS) - 7 * MINUTE
    lo = max(end - dt.timedelta(hours=hours), START)
    return lo, end


def ts(t):
    return f"TIMESTAMPTZ '{t.isoformat()}'"


def host_in(hs):
    return "(" + ", ".join(f"'{h}'" for h in hs) + ")"


def questions():
    """(question, SQL) in the matrix's order."""
    out = []
    for m, h, t in [(1, 1, 1), (1, 1, 12), (1, 8, 1), (5, 1, 1), (5, 1, 12), (5, 8, 1)]:
        lo, hi = window(t)
        cols = ", ".join(f"max({f}) AS max_{f}" for f in FIELDS[:m])
        out.append((f"single-groupby-{m}-{h}-{t}",
                    f"SELECT date_trunc('minute', time) AS minute, {cols} FROM cpu "
                    f"WHERE \"tags.hostname\" IN {host_in(hosts(h))} AND time >= {ts(lo)} "
                    f"AND time < {ts(hi)} GROUP BY 1 ORDER BY 1"))
    for h in [1, 8]:
        lo, hi = window(8)
        cols = ", ".join(f"max({f}) AS max_{f}" for f in FIELDS)
        out.append((f"cpu-max-all-{h}",
                    f"SELECT date_trunc('hour', time) AS hour, {cols} FROM cpu "
                    f"WHERE \"tags.hostname\" IN {host_in(hosts(h))} AND time >= {ts(lo)} "
                    f"AND time < {ts(hi)} GROUP BY 1 ORDER BY 1"))
    for name, n in [("double-groupby-1", 1), ("double-groupby-5", 5), ("double-groupby-all", 10)]:
        lo, hi = window(12)
        cols = ", ".join(f"avg({f}) AS avg_{f}" for f in FIELDS[:n])
        out.append((name,
                    f"SELECT \"tags.hostname\" AS host, date_trunc('hour', time) AS hour, {cols} "
                    f"FROM cpu WHERE time >= {ts(lo)} AND time < {ts(hi)} GROUP BY 1, 2"))
    for name, one in [("high-cpu-all", False), ("high-cpu-1", True)]:
        lo, hi = window(12)
        host = f" AND \"tags.hostname\" = '{hosts(1)[0]}'" if one else ""
        out.append((name,
                    f"SELECT time, \"tags.hostname\", usage_user, usage_system FROM cpu "
                    f"WHERE usage_user > 90 AND time >= {ts(lo)} AND time < {ts(hi)}{host}"))
    out.append(("lastpoint",
                "SELECT DISTINCT ON (\"tags.hostname\") \"tags.hostname\", time, "
                + ", ".join(FIELDS) + " FROM cpu ORDER BY \"tags.hostname\", time DESC"))
    _, hi = window(1)
    out.append(("groupby-orderby-limit",
                f"SELECT date_trunc('minute', time) AS minute, max(usage_user) FROM cpu "
                f"WHERE time < {ts(hi)} GROUP BY 1 ORDER BY 1 DESC LIMIT 5"))
    out.append(("host-latest-10",
                f"SELECT * FROM cpu WHERE \"tags.hostname\" = '{hosts(1)[0]}' "
                f"ORDER BY time DESC LIMIT 10"))
    out.append(("top-usage-10",
                "SELECT * FROM cpu ORDER BY usage_user DESC LIMIT 10"))
    out.append(("usage-histogram",
                "SELECT usage_user, count(*) AS n FROM cpu GROUP BY 1 ORDER BY 1"))
    out.append(("busiest-time",
                "SELECT DISTINCT ON (\"tags.hostname\") \"tags.hostname\", time, usage_user "
                "FROM cpu ORDER BY \"tags.hostname\", usage_user DESC, time"))
    out.append(("count-per-period",
                "SELECT date_trunc('minute', timestamp) AS minute, count(*) FROM s004 "
                "GROUP BY 1 ORDER BY 1"))
    out.append(("sum-per-period-cmd",
                "SELECT date_trunc('minute', timestamp) AS period, \"dims.vCmdid\" AS cmd, "
                "sum(totalCount) AS total FROM s004 WHERE \"dims.vAppid\" <> '' GROUP BY 1, 2"))
    out.append(("sum-per-period-cmd, sorted",
                "SELECT date_trunc('minute', timestamp) AS period, \"dims.vCmdid\" AS cmd, "
                "sum(totalCount) AS total FROM s004 WHERE \"dims.vAppid\" <> '' "
                "GROUP BY 1, 2 ORDER BY 1, 2"))
    return out


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="compare-work")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    import duckdb  # noqa: PLC0415 (a clear message if the package is missing comes first)

    os.makedirs(a.work, exist_ok=True)
    cpu_csv = os.path.join(a.work, "devops.csv")
    s004_csv = os.path.join(a.work, "seed004.csv")
    run(["cargo", "build", "--release", "-q", "-p", "tsbucket-cli", "--bin", "tsbucket"])
    if not os.path.exists(cpu_csv):
        run(["target/release/tsbucket", "gen", "devops", "--hosts", str(HOSTS),
             "--hours", str(HOURS), "--out", cpu_csv])
    if not os.path.exists(s004_csv):
        run(["target/release/tsbucket", "gen", "seed004", "--scale", "0.25", "--out", s004_csv])

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TABLE cpu AS SELECT * FROM read_csv_auto('{cpu_csv}')")
    con.execute(f"CREATE TABLE s004 AS SELECT * FROM read_csv_auto('{s004_csv}')")
    duck = {}
    for name, sql in questions():
        times = []
        for _ in range(a.runs):
            t = time.perf_counter()
            con.execute(f"CREATE OR REPLACE TEMP TABLE result AS {sql}")
            times.append((time.perf_counter() - t) * 1000)
        rows = con.execute("SELECT count(*) FROM result").fetchone()[0]
        duck[name] = (statistics.median(times), rows)

    env = dict(os.environ, TSBUCKET_AGG_DIR=os.path.join(a.work, "tsbucket-db"))
    out = run(["cargo", "bench", "-q", "--bench", "formulations", "--", str(a.runs)],
              env=env, capture_output=True, text=True).stdout
    forms = {}
    for line in out.splitlines():
        m = re.match(r"^([\w-]+) \| ([\w-]+) \| ([\d.]+) \| (\d+) \|", line)
        if m:
            forms.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    for (name, (ms, rows)) in duck.items():
        base = name.split(",")[0]
        f = forms.get(base, {})
        if name.endswith("sorted"):
            f = {k: v for k, v in f.items() if k.startswith("sorted")}
        # Forms that take BSON bytes instead of `Document`s are a column of their own.
        raw = [v for k, v in f.items() if k.endswith("-bson")]
        f = {k: v for k, v in f.items() if not k.endswith("-bson")}
        if not f:
            print(f"| {name} | {ms:.2f} | {rows} | - | - | - | - | - |")
            continue
        fast, slow = min(f.values()), max(f.values())
        bson = f"{min(raw):.3f} ({ms / min(raw):.2f})" if raw else "-"
        print(f"| {name} | {ms:.2f} | {rows} | {fast:.3f} | {slow:.3f} | "
              f"{ms / fast:.2f} | {ms / slow:.2f} | {bson} |")


if __name__ == "__main__":
    print("| question | DuckDB ms | DuckDB rows | tsbucket fastest form ms | slowest form ms "
          "| DuckDB / fastest | DuckDB / slowest | BSON form ms (DuckDB / it) |")
    print("|---|---|---|---|---|---|---|---|")
    main()
