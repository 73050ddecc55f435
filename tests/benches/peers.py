"""The Python peers of the lakehouse benchmark (tests/benches/lakehouse.rs runs this script).

`write`: the same write-audit-publish work the bench does with lake, done with pyiceberg 0.12
(SQL catalog on SQLite, local warehouse, pyarrow): a seed row on `main`, an `audit` branch at
it, K appends of N rows to `audit`, then R rounds of (one more append, fast-forward `main` to
`audit`), then 15 tables each fast-forwarded one at a time. Rows are a formula of their id, the
same as the bench's: id, id % 97, id * 7919 % 100003.

`read`: reads a table lake wrote, by its metadata location, with pyiceberg and with DuckDB's
iceberg extension (loaded from the PyPI wheels, nothing downloaded): count and sum of `amount`
at each snapshot given (pyiceberg: all columns, then `amount` alone), and a filtered aggregate
at `main`.

Every command prints one JSON object on stdout: timings in seconds, and the counts and sums the
bench compares with its own.
"""

import argparse
import glob
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("grp", pa.int64(), nullable=False),
        pa.field("amount", pa.int64(), nullable=False),
    ]
)


def rows(start, n):
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.Table.from_arrays(
        [ids, pc.remainder(ids, 97), pc.remainder(pc.multiply(ids, 7919), 100003)],
        schema=SCHEMA,
    )


def seed():
    return pa.Table.from_arrays([pa.array([-1], pa.int64()), pa.array([0], pa.int64()), pa.array([0], pa.int64())], schema=SCHEMA)


def metadata_bytes(table_dir):
    total = 0
    for f in glob.glob(os.path.join(table_dir, "metadata", "*")):
        total += os.path.getsize(f)
    return total


def new_table(cat, name):
    t = cat.create_table(name, schema=SCHEMA)
    t.append(seed())
    t.manage_snapshots().create_branch(t.metadata.current_snapshot_id, "audit").commit()
    return t


def write(args):
    from pyiceberg.catalog.sql import SqlCatalog

    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    cat = SqlCatalog("bench", uri=f"sqlite:///{d}/catalog.db", warehouse=f"file://{d}")
    cat.create_namespace("bench")
    t = new_table(cat, "bench.t")
    # Batches are built before the clock starts, as the bench builds its own.
    batches = [rows(i * args.n, args.n) for i in range(args.k + args.ff)]
    append_s = []
    for i in range(args.k):
        t0 = time.perf_counter()
        t.append(batches[i], branch="audit")
        append_s.append(time.perf_counter() - t0)
    md_bytes = metadata_bytes(os.path.join(d, "bench", "t"))
    md_json = os.path.getsize(t.metadata_location.removeprefix("file://"))
    ff_s = []
    for r in range(args.ff):
        t.append(batches[args.k + r], branch="audit")
        t0 = time.perf_counter()
        t.manage_snapshots().set_current_snapshot(ref_name="audit").commit()
        ff_s.append(time.perf_counter() - t0)
    main = t.scan(snapshot_id=t.metadata.refs["main"].snapshot_id).to_arrow()
    out = {
        "append_s": append_s,
        "ff_s": ff_s,
        "metadata_bytes": md_bytes,
        "metadata_json_bytes": md_json,
        "main_count": main.num_rows,
        "main_sum": pc.sum(main["amount"]).as_py(),
    }
    if args.tables:
        tables = [new_table(cat, f"bench.t{j:02}") for j in range(args.tables)]
        ff_all_s = []
        for r in range(args.ff):
            for j, tj in enumerate(tables):
                tj.append(rows((r * args.tables + j) * 10, 10), branch="audit")
            t0 = time.perf_counter()
            for tj in tables:
                tj.manage_snapshots().set_current_snapshot(ref_name="audit").commit()
            ff_all_s.append(time.perf_counter() - t0)
        out["ff_tables_s"] = ff_all_s
    print(json.dumps(out))


def duckdb_connection():
    import duckdb

    c = duckdb.connect()
    for ext in ["avro", "iceberg"]:
        mod = __import__(f"duckdb_extension_{ext}")
        found = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", f"{ext}.duckdb_extension"))
        if not found:
            sys.exit(f"the duckdb-extension-{ext} wheel holds no {ext}.duckdb_extension")
        c.sql(f"LOAD '{found[0]}'")
    return c


def read(args):
    from pyiceberg.table import StaticTable

    snapshots = [int(s) for s in args.snapshots.split(",") if s]
    out = {"pyiceberg": {}, "duckdb": {}}
    t = StaticTable.from_metadata(args.metadata)
    tt_s, checks = [], []
    for s in snapshots:
        t0 = time.perf_counter()
        tab = t.scan(snapshot_id=s).to_arrow()
        n, total = tab.num_rows, pc.sum(tab["amount"]).as_py() or 0
        tt_s.append(time.perf_counter() - t0)
        checks.append([n, total])
    col_s = []
    for s in snapshots:
        t0 = time.perf_counter()
        tab = t.scan(snapshot_id=s, selected_fields=("amount",)).to_arrow()
        n, total = tab.num_rows, pc.sum(tab["amount"]).as_py() or 0
        col_s.append(time.perf_counter() - t0)
        checks.append([n, total])
    f_s = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        tab = t.scan(row_filter=f"id >= {args.filter_min}", selected_fields=("amount",)).to_arrow()
        fn, ftotal = tab.num_rows, pc.sum(tab["amount"]).as_py() or 0
        f_s.append(time.perf_counter() - t0)
    out["pyiceberg"] = {
        "time_travel_s": tt_s,
        "time_travel_column_s": col_s,
        "checks": checks,
        "filtered_s": f_s,
        "filtered": [fn, ftotal],
    }

    c = duckdb_connection()
    loc = args.metadata
    tt_s, checks = [], []
    for s in snapshots:
        t0 = time.perf_counter()
        n, total = c.sql(f"SELECT count(*), sum(amount) FROM iceberg_scan('{loc}', snapshot_from_id => {s})").fetchone()
        tt_s.append(time.perf_counter() - t0)
        checks.append([n, int(total or 0)])
    f_s = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fn, ftotal = c.sql(f"SELECT count(*), sum(amount) FROM iceberg_scan('{loc}') WHERE id >= {args.filter_min}").fetchone()
        f_s.append(time.perf_counter() - t0)
    out["duckdb"] = {"time_travel_s": tt_s, "checks": checks, "filtered_s": f_s, "filtered": [fn, int(ftotal or 0)]}
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--dir", required=True)
    w.add_argument("--k", type=int, required=True)
    w.add_argument("--n", type=int, required=True)
    w.add_argument("--ff", type=int, required=True)
    w.add_argument("--tables", type=int, default=0)
    r = sub.add_parser("read")
    r.add_argument("--metadata", required=True)
    r.add_argument("--snapshots", required=True)
    r.add_argument("--filter-min", type=int, required=True)
    r.add_argument("--repeats", type=int, required=True)
    a = p.parse_args()
    {"write": write, "read": read}[a.cmd](a)


if __name__ == "__main__":
    main()
