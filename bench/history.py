"""A long history on both backends: what a day costs when the index already holds millions of
contents, through the CLI, as same-run ratios against an empty index.

1. **build** — ``--millions`` batches of ``--batch-records`` (1,000,000) new records each, from
   the mosaic generator of `bench.build_corpus` (``Mosaics``, one seed per batch), each written
   as a CPT package, indexed into the SQLite file and into the PostgreSQL database (one batch
   each, ``--workers 2``), then deleted. History records are shorter mosaics than the pool's
   (``--min-len``/``--max-len``: lengths drawn from the real length distribution within
   200–800 characters, a longer mosaic cut to an 800-character window):
   what the history costs a later day is the number of contents and band rows (16 per
   content) that lookups and joins meet, not the length of the texts, and short texts keep a
   10M-content build within hours on two cores.
2. **measure** — on each backend, in the same run:
   (a) day N+1: append a 50,000-record package of new content (``day-1m``) to the history
   index, and to an empty index before and after it;
   (b) append a 100,000-record pool (``--pool``, default ``pool-100k-mosaic-rot13``:
   full-length mosaics with 30 % reprints, ROT13-encoded, see `ensure_pool`) to the history
   index and to an empty one, then scan it against each,
   alternating history and empty for ``--rounds`` rounds.
   Reports of the two backends must be byte-identical (history against history, empty
   against empty).
2b. **layout** — the two band tables (``bands`` and the small ``bands_recent``, folded into
   ``bands`` at an eighth of it) as a run of days meets them, through `layout`: day N+1, a
   history batch that fills ``bands_recent`` to just under the eighth, day N+2 against it,
   a day that folds, and the pool's scans between them; each append alternates with the same
   package into an empty index.
2c. **days** — day packages (``--days``) appended to the history, each between two appends
   of the same package to an empty index, both backends.
2d. **scans** — the pool's scan against the history and against the pool alone (the layout
   step's pool-only indexes), both backends, alternating ``--rounds`` rounds.
3. **partition** — PostgreSQL only: a copy of the band table hash-partitioned by key
   (``--partitions``), filled in the band table's own order (batch after batch, each in key
   order, as the index fills it); then,
   alternating, ``COPY`` of one day's band rows into each (rolled back) and the scan's
   history join of the pool's band keys against each.
4. **plan** — PostgreSQL only: the scan's history join as a plain join left to the planner,
   and as the product writes it (one probe of the band table per key), alternating.

Progress is kept in ``<out>/state.json``: rerunning the same command continues where it
stopped (a package whose batch was not recorded is generated again; indexing a package
the index already holds is "nothing to do"). The build stops before the disk would have less
than ``--min-free-gb`` free. The PostgreSQL server (Debian's binaries, started like the tests'
fixture, with a larger WAL) keeps its data under ``--pg-root`` between runs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from near_dedup_core.fsutil import sha256_file

from bench.build_corpus import REAL, Mosaics, ensure, make_package, read_jsonl
from bench.e2e import CONFIG, REPORT_FILES, index_bytes
from bench.measure import Measurement, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from pg_server import PostgresServer, find_bindir  # noqa: E402

HISTORY_DB = "history"
#: As the tests' server (fsync off: a bench, not a store), with room for a batch's WAL
#: between checkpoints and a buffer cache a dedicated server would have.
PG_SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}


class State:
    """``state.json``: what has been built and measured; written atomically after each step."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = (orjson.loads(path.read_bytes()) if path.exists()
                                     else {"built": [], "measure": {}, "partition": {}})

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(self.data, option=orjson.OPT_INDENT_2))
        tmp.replace(self.path)


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def cli(out: Path, name: str, index: str, args: list[str]) -> Measurement:
    cmd = [sys.executable, "-m", "near_dedup_core", "--index", index, "--config", str(CONFIG),
           "--quiet", *args]
    m = run(cmd, out / "logs" / f"{name}.log", cwd=ROOT)
    print(f"[{wall_clock()}] {name}: exit {m.returncode}, wall {m.wall_s:.1f} s, CPU "
          f"{m.cpu_s:.1f} s, peak tree RSS {m.peak_tree_rss_mib:,.0f} MiB; "
          f"{m.stdout.strip()[-200:]}", flush=True)
    if m.returncode != 0:
        raise SystemExit(f"history: {name} failed: {m.stderr_tail}")
    return m


def pg_size(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as con:
        return con.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def history_records(real: list[dict], batch: int, n: int, min_len: int, max_len: int):
    """``n`` mosaics of ``min_len``–``max_len`` characters: the generator's record, cut to a
    window of at most ``max_len`` characters at a random offset (a cut at the start would
    make records that share a base window identical)."""
    mosaics = Mosaics(real, seed=1000 + batch, min_len=min_len, max_len=max_len)
    rng = mosaics.rng
    for i in range(n):
        text, domain, source = mosaics.record()
        if len(text) > max_len:
            start = rng.randrange(len(text) - max_len + 1)
            text = text[start:start + max_len]
            source = {**source, "cut": start}
        yield {"id": f"hist{batch:02d}-{i:07d}", "text": text, "domain": domain,
               "source": source}


# --------------------------------------------------------------------------- 1. build


def build(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    out: Path = args.out
    lite = str(out / "history.sqlite")
    url = server.url(HISTORY_DB)
    real: list[dict] | None = None
    built = state.data["built"]
    while len(built) < args.millions:
        k = len(built)
        need = built[-1]["grew_bytes"] * 1.2 if built else 0
        free = free_bytes(out)
        if free - need < args.min_free_gb * 1e9:
            print(f"[{wall_clock()}] build: stopping at {k} batches: {free / 1e9:.1f} GB free, "
                  f"the next batch needs ~{need / 1e9:.1f} GB", flush=True)
            break
        pkg_id = f"hist-{k:02d}"
        pkg = out / "work" / pkg_id
        if pkg.exists():
            shutil.rmtree(pkg)
        real = real if real is not None else list(read_jsonl(REAL))
        before = index_bytes(Path(lite)) + pg_size(url)
        t0 = time.monotonic()
        stats = make_package(history_records(real, k, args.batch_records, args.min_len,
                                             args.max_len), pkg_id, pkg, out / "work")
        gen_s = time.monotonic() - t0
        row: dict[str, Any] = {"batch": k, "records": stats["records"],
                               "text_bytes": stats["text_bytes"], "generate_s": round(gen_s, 1)}
        # Alternate which backend goes first, so that neither always meets a warm page cache.
        order = [("sqlite", lite), ("postgresql", url)]
        if k % 2:
            order.reverse()
        for side, index in order:
            m = cli(out, f"build-{k:02d}-{side}", index,
                    ["index", "--inputs", str(pkg), "--workers", str(args.workers)])
            row[f"{side}_index_s"] = round(m.wall_s, 1)
        shutil.rmtree(pkg)
        row["sqlite_bytes"] = index_bytes(Path(lite))
        row["postgresql_bytes"] = pg_size(url)
        row["grew_bytes"] = row["sqlite_bytes"] + row["postgresql_bytes"] - before
        row["free_bytes_after"] = free_bytes(out)
        built.append(row)
        state.save()
        print(f"[{wall_clock()}] build: batch {k} done: {row}", flush=True)


# --------------------------------------------------------------------------- 2. measure


def empty_index(server: PostgresServer, work: Path, side: str, name: str, prefix: str) -> str:
    """A new empty index called ``name``: a SQLite path in ``work`` (any old file removed) or
    a freshly created database ``<prefix><name>``."""
    if side == "sqlite":
        path = work / f"{name}.sqlite"
        for p in (path, path.with_name(path.name + "-wal")):
            p.unlink(missing_ok=True)
        return str(path)
    dbname = f"{prefix}{name.replace('-', '_')}"
    server.execute(f"DROP DATABASE IF EXISTS {dbname}")
    server.execute(f"CREATE DATABASE {dbname} TEMPLATE template0")
    return server.url(dbname)


def measure(  # noqa: C901 (the benchmark's steps in the order its report lists them)
        args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    out: Path = args.out
    done: dict[str, Any] = state.data["measure"]
    (day,) = ensure("day-1m")
    pool = ensure_pool(args.pool)
    history = {"sqlite": str(out / "history.sqlite"), "postgresql": server.url(HISTORY_DB)}
    work = out / "measure"
    work.mkdir(exist_ok=True)
    empties: list[str] = []

    def empty(side: str, name: str) -> str:
        index = empty_index(server, work, side, name, "m_")
        if side == "postgresql":
            empties.append(index.rsplit("/", 1)[1])
        return index

    def step(name: str, index: str, argv: list[str]) -> float:
        if name not in done:
            done[name] = round(cli(out, name, index, argv).wall_s, 2)
            state.save()
        return done[name]

    if "history_contents" not in done:
        import psycopg

        with psycopg.connect(history["postgresql"]) as con:
            done["history_contents"] = con.execute("SELECT COUNT(*) FROM contents").fetchone()[0]
            done["history_band_rows"] = con.execute("SELECT COUNT(*) FROM bands").fetchone()[0]
            done["history_sources"] = con.execute("SELECT COUNT(*) FROM sources").fetchone()[0]
        state.save()
    sides = ("sqlite", "postgresql")
    w = ["--workers", str(args.workers)]
    # (a) Day N+1: empty, history, empty.
    for side in sides:
        if f"day-{side}-history" in done:
            continue
        step(f"day-{side}-empty-1", empty(side, f"day-{side}-1"), ["index", "--inputs", str(day), *w])
        step(f"day-{side}-history", history[side], ["index", "--inputs", str(day), *w])
        step(f"day-{side}-empty-2", empty(side, f"day-{side}-2"), ["index", "--inputs", str(day), *w])
    # (b) The pool appended to the history and to an empty index, then scanned against each.
    pool_only = {}
    for side in sides:
        name = f"{args.pool}-{side}"
        if side == "sqlite":
            pool_only[side] = str(work / f"{name}.sqlite")
        else:
            pool_only[side] = server.url(f"m_{name.replace('-', '_')}")
        if f"{name}-empty-index" not in done:
            step(f"{name}-empty-index", empty(side, name), ["index", "--inputs", str(pool), *w])
        step(f"{name}-history-index", history[side], ["index", "--inputs", str(pool), *w])
    digests: dict[str, dict[str, str]] = done.setdefault("digests", {})
    for r in range(args.rounds):
        for side in sides:
            for where, index in (("history", history[side]), ("empty", pool_only[side])):
                name = f"scan-{args.pool}-{side}-{where}-{r}"
                if name in done:
                    continue
                report = work / f"report-{side}-{where}"
                if report.exists():
                    shutil.rmtree(report)
                step(name, index, ["scan", "--inputs", str(pool), "--output", str(report), *w])
                digests[f"{side}-{where}-{r}"] = {f: sha256_file(report / f) for f in REPORT_FILES}
                counts = orjson.loads((report / "manifest.json").read_bytes()).get("counts")
                done[f"counts-{args.pool}-{where}"] = counts
                shutil.rmtree(report)
                state.save()
    same_history = _packages(history["sqlite"]) == _packages(history["postgresql"])
    done["same_history_packages"] = same_history
    for where in ("history", "empty"):
        got = {side: {orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for k, v in digests.items()
                      if k.startswith(f"{side}-{where}-")} for side in sides}
        if any(len(v) != 1 for v in got.values()):
            raise SystemExit(f"history: the reports against the {where} index differ between "
                             f"rounds: {digests}")
        same = got["sqlite"] == got["postgresql"]
        done[f"reports_identical_across_backends_{where}"] = same
        if not same and (where == "empty" or same_history):
            raise SystemExit(f"history: the reports against the {where} index differ between "
                             f"backends: {digests}")
    state.save()
    for dbname in empties:
        if not dbname.startswith("m_pool"):
            server.execute(f"DROP DATABASE IF EXISTS {dbname}")


def ensure_pool(name: str) -> Path:
    """A `bench.build_corpus` package, or ``<package>-rot13``: that package with every text
    ROT13-encoded (ids, sources and the pool's own reprint structure kept). Such a pool shares
    no shingle with the history, built from the same real text: its scan meets the history
    only in the band lookup, as a day of unrelated new content does."""
    if not name.endswith("-rot13"):
        return ensure(name)[0]
    import codecs

    from bench.build_corpus import PKG_DIR

    out = PKG_DIR / name
    if not out.exists():
        (base,) = ensure(name.removesuffix("-rot13"))

        def records():
            for path in sorted((base / "data").rglob("*.jsonl")):
                for rec in read_jsonl(path):
                    yield {k: rec[k] for k in ("id", "domain", "source") if k in rec} | {
                        "text": codecs.encode(rec["text"], "rot13")}

        make_package(records(), name, out, OUT_WORK)
    return out


OUT_WORK = ROOT / "bench" / "out" / "work"


def _packages(index: str) -> list[str]:
    """The package ids of an index in batch order (the two backends' histories must hold the
    same ones for their reports to be compared)."""
    sql = "SELECT package_id FROM packages ORDER BY batch, package_id"
    if index.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(index) as con:
            return [r[0] for r in con.execute(sql)]
    import sqlite3

    con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute(sql)]
    finally:
        con.close()


# --------------------------------------------------------------------------- 2b. layout


def band_layout(index: str) -> dict[str, int]:
    """Where the index's band rows are: ``bands_merged_through``, the newest content row id,
    and the rows of ``bands_recent`` (``bands`` is too large to count in passing)."""
    sql = ("SELECT (SELECT value FROM meta WHERE key = 'bands_merged_through'), "
           "(SELECT MAX(id) FROM contents), (SELECT COUNT(*) FROM bands_recent)")
    if index.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(index) as con:
            merged, newest, recent = con.execute(sql).fetchone()
    else:
        import sqlite3

        with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as con:
            merged, newest, recent = con.execute(sql).fetchone()
    return {"merged_through": int(merged), "newest_content": newest,
            "recent_contents": newest - int(merged), "recent_band_rows": recent}


def layout(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    """The history with two band tables (schema 3), as a run of days meets it, on both
    backends: each append alternates with the same package into an empty index.

    1. day N+1 (``day-1m-b``), the history's first append since ``bands_recent`` (which
       upgrades it), then the pool's scan against it and against the pool alone;
    2. a history batch that fills ``bands_recent`` to just under an eighth of ``bands``
       (``hist-fill``, mosaics as in the build), then day N+2 (``day-1m-c``) against the
       full ``bands_recent``, and the scans again: the worst day and scan between folds;
    3. a 100,000-record day (``day-1m-fold``) that crosses the eighth: its append folds
       ``bands_recent`` into ``bands``."""
    out: Path = args.out
    done: dict[str, Any] = state.data.setdefault(f"layout{args.layout_round}", {})
    day_b, day_c, fold_day = ensure(*args.layout_days)
    pool = ensure_pool(args.pool)
    history = {"sqlite": str(out / "history.sqlite"), "postgresql": server.url(HISTORY_DB)}
    work = out / "measure"
    sides = ("sqlite", "postgresql")
    w = ["--workers", str(args.workers)]

    def step(name: str, index: str, argv: list[str]) -> None:
        if name not in done:
            m = cli(out, name, index, argv)
            done[name] = round(m.wall_s, 2)
            done[f"{name}-cpu"] = round(m.cpu_s, 2)
            done[f"{name}-out"] = m.stdout.strip()[-300:]
            if index in history.values():
                done[f"{name}-layout"] = band_layout(index)
            state.save()

    def empty(side: str, name: str) -> str:
        return empty_index(server, work, side, name, "l_")

    def append(label: str, pkg: Path) -> None:
        for side in sides:
            argv = ["index", "--inputs", str(pkg), *w]
            step(f"{label}-{side}-empty-1", empty(side, f"{label}-{side}-1"), argv)
            step(f"{label}-{side}-history", history[side], argv)
            step(f"{label}-{side}-empty-2", empty(side, f"{label}-{side}-2"), argv)

    def scan_rounds(label: str) -> None:
        for r in range(args.rounds):
            for side in sides:
                for where, index in (("history", history[side]), ("empty", pool_only[side])):
                    name = f"{label}-scan-{side}-{where}-{r}"
                    report = work / f"layout-report-{side}-{where}"
                    if report.exists():
                        shutil.rmtree(report)
                    step(name, index, ["scan", "--inputs", str(pool), "--output", str(report),
                                       *w])
                    if report.exists():
                        done[f"{name}-digest"] = {f: sha256_file(report / f)
                                                  for f in REPORT_FILES}
                        shutil.rmtree(report)
                        state.save()

    pool_only = {}
    for side in sides:
        name = f"pool-only-{side}"
        pool_only[side] = (str(work / f"{name}.sqlite") if side == "sqlite"
                           else server.url(f"l_{name.replace('-', '_')}"))
        if name not in done:
            step(name, empty(side, name), ["index", "--inputs", str(pool), *w])
    append("day-b", day_b)
    scan_rounds("day-b")
    if "fill" not in done:
        now = band_layout(history["sqlite"])
        room = int(now["merged_through"] / 8) - now["recent_contents"]
        # to 100,000 contents under the eighth: day N+2 (50,000) stays under it, the fold day
        # (100,000) crosses it; history records are 0.915 contents each (the build's ratio)
        records = int((room - 100_000) / 0.915)
        real = list(read_jsonl(REAL))
        parts = -(-records // args.batch_records)  # batches of at most max_pool_records
        for k in range(parts):
            pkg_id = f"hist-fill{args.layout_round}-{k}"
            pkg = out / "work" / pkg_id
            if pkg.exists():
                shutil.rmtree(pkg)
            make_package(history_records(real, args.layout_seed + k, records // parts, args.min_len,
                                         args.max_len), pkg_id, pkg, out / "work")
            for side in sides:
                step(f"fill-{k}-{side}-history", history[side],
                     ["index", "--inputs", str(pkg), *w])
            shutil.rmtree(pkg)
        done["fill"] = records
        state.save()
    append("day-c", day_c)
    scan_rounds("day-c")
    append("fold", fold_day)
    scan_rounds("fold")


def days(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    """Day appends (``--days``: `bench.build_corpus` packages of new content) to the history,
    each between two appends of the same package to an empty index, both backends; each
    run is appended to ``state.json`` under ``days``."""
    out: Path = args.out
    runs: list[dict[str, Any]] = state.data.setdefault("days", [])
    work = out / "measure"
    history = {"sqlite": str(out / "history.sqlite"), "postgresql": server.url(HISTORY_DB)}
    for day in ensure(*args.days):
        for side in ("sqlite", "postgresql"):
            walls = {}
            for where in ("empty-1", "history", "empty-2"):
                index = (history[side] if where == "history" else
                         empty_index(server, work, side, f"days-{side}-{where}", "l_"))
                m = cli(out, f"days-{day.name}-{side}-{where}", index,
                        ["index", "--inputs", str(day), "--workers", str(args.workers)])
                walls[where] = round(m.wall_s, 2)
                runs.append({"day": day.name, "side": side, "where": where, "at": wall_clock(),
                             "wall_s": walls[where], "cpu_s": round(m.cpu_s, 2)})
                state.save()
            empty = (walls["empty-1"] + walls["empty-2"]) / 2
            print(f"days {day.name} {side}: {walls['history']:.1f} s to the history, "
                  f"{empty:.1f} s to an empty index (×{walls['history'] / empty:.2f})")


def scans(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    """The pool's scan against the history and against the pool alone (the ``layout`` step's
    pool-only indexes), both backends, alternating, ``--rounds`` rounds; each run is
    appended to ``state.json`` under ``scans``."""
    out: Path = args.out
    runs: list[dict[str, Any]] = state.data.setdefault("scans", [])
    work = out / "measure"
    pool = ensure_pool(args.pool)
    indexes = {("sqlite", "history"): str(out / "history.sqlite"),
               ("sqlite", "empty"): str(work / "pool-only-sqlite.sqlite"),
               ("postgresql", "history"): server.url(HISTORY_DB),
               ("postgresql", "empty"): server.url("l_pool_only_postgresql")}
    for r in range(args.rounds):
        for (side, where), index in indexes.items():
            report = work / f"scans-report-{side}-{where}"
            if report.exists():
                shutil.rmtree(report)
            m = cli(out, f"scans-{side}-{where}-{r}", index,
                    ["scan", "--inputs", str(pool), "--output", str(report), "--workers",
                     str(args.workers)])
            runs.append({"side": side, "where": where, "round": r, "wall_s": round(m.wall_s, 2),
                         "cpu_s": round(m.cpu_s, 2), "at": wall_clock(),
                         "digest": {f: sha256_file(report / f) for f in REPORT_FILES}})
            shutil.rmtree(report)
            state.save()
    for side in ("sqlite", "postgresql"):
        last = runs[-4 * args.rounds:]
        h = [x["wall_s"] for x in last if (x["side"], x["where"]) == (side, "history")]
        e = [x["wall_s"] for x in last if (x["side"], x["where"]) == (side, "empty")]
        print(f"scans {side}: {h} against the history, {e} against the pool alone "
              f"(×{statistics.median(h) / statistics.median(e):.2f})")


# --------------------------------------------------------------------------- 3. partition


def partition(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    """The band table hash-partitioned by key against the index's own, on the same rows."""
    import psycopg

    done: dict[str, Any] = state.data["partition"]
    url = server.url(HISTORY_DB)
    parts = args.partitions
    with psycopg.connect(url, autocommit=True) as con:
        if done.get("partitions") != parts or not done.get("filled"):
            con.execute("DROP SCHEMA IF EXISTS bench_part CASCADE")
            con.execute("CREATE SCHEMA bench_part")
            con.execute("CREATE TABLE bench_part.bands (key BIGINT NOT NULL, "
                        "content BIGINT NOT NULL, PRIMARY KEY (key, content)) "
                        "PARTITION BY HASH (key)")
            for i in range(parts):
                con.execute(f"CREATE TABLE bench_part.bands_{i:03d} PARTITION OF "
                            f"bench_part.bands FOR VALUES WITH (MODULUS {parts}, REMAINDER {i})")
            # In heap order, which is the order the index was filled in: batch after batch,
            # each batch's rows in key order (COPY of rows sorted by key). So each partition's
            # B-tree grows as it would have under the same appends.
            t0 = time.monotonic()
            con.execute("INSERT INTO bench_part.bands SELECT key, content FROM bands")
            con.execute("ANALYZE bench_part.bands")
            done.update(partitions=parts, filled=True, fill_s=round(time.monotonic() - t0, 1))
            state.save()
        sizes = {name: con.execute(f"SELECT pg_total_relation_size('{name}')").fetchone()[0]
                 for name in ("bands",)}
        sizes["bench_part.bands"] = con.execute(
            "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits "
            "WHERE inhparent = 'bench_part.bands'::regclass").fetchone()[0]
        done["bytes"] = {k: int(v) for k, v in sizes.items()}
        band_rows = con.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'bands'::regclass"
                                ).fetchone()[0]
        done["band_rows"] = band_rows
        # One day's band rows (the day package's batch), under new content ids.
        day_batch = con.execute("SELECT batch FROM packages WHERE package_id = 'day-1m'"
                                ).fetchone()[0]
        pool_batch = con.execute("SELECT batch FROM packages WHERE package_id = %s",
                                 (args.pool,)).fetchone()[0]
        offset = 1 << 40
        day_rows = con.execute("SELECT b.key, b.content + %s FROM bands b JOIN contents c "
                               "ON c.id = b.content WHERE c.batch = %s ORDER BY 1, 2",
                               (offset, day_batch)).fetchall()
        pool_keys = [k for (k,) in con.execute(
            "SELECT DISTINCT b.key FROM bands b JOIN contents c ON c.id = b.content "
            "WHERE c.batch = %s ORDER BY 1", (pool_batch,))]
    done.update(day_band_rows=len(day_rows), pool_distinct_keys=len(pool_keys))
    timings: dict[str, list[float]] = {"copy-plain": [], "copy-hash": [],
                                       "join-plain": [], "join-hash": []}
    hits: dict[str, int] = {}
    for _r in range(args.rounds + 1):
        for table, side in (("bands", "plain"), ("bench_part.bands", "hash")):
            with psycopg.connect(url) as con:
                t0 = time.monotonic()
                with con.cursor() as cur:
                    with cur.copy(f"COPY {table} (key, content) FROM STDIN") as copy:
                        for row in day_rows:
                            copy.write_row(row)
                timings[f"copy-{side}"].append(time.monotonic() - t0)
                con.rollback()
            with psycopg.connect(url) as con:
                con.execute("CREATE TEMP TABLE scan_keys (key BIGINT PRIMARY KEY)")
                with con.cursor() as cur:
                    with cur.copy("COPY scan_keys (key) FROM STDIN") as copy:
                        for k in pool_keys:
                            copy.write_row((k,))
                con.execute("ANALYZE scan_keys")
                sql = f"SELECT b.key, b.content FROM scan_keys q JOIN {table} b ON b.key = q.key"
                t0 = time.monotonic()
                n = len(con.execute(sql).fetchall())
                timings[f"join-{side}"].append(time.monotonic() - t0)
                hits[side] = n
                plan = [r[0] for r in con.execute("EXPLAIN " + sql)]
                done[f"plan-{side}"] = plan[:3]
                con.rollback()
        print(f"[{wall_clock()}] partition round: "
              f"{ {k: round(v[-1], 2) for k, v in timings.items()} }", flush=True)
    if hits["plain"] != hits["hash"]:
        raise SystemExit(f"history: the joins found {hits}")
    # The first round warms the caches for both; the figures are the later rounds' medians.
    done["timings_s"] = {k: [round(x, 3) for x in v] for k, v in timings.items()}
    done["median_s"] = {k: round(statistics.median(v[1:]), 3) for k, v in timings.items()}
    done["join_rows"] = hits["plain"]
    state.save()


def plan(args: argparse.Namespace, state: State, server: PostgresServer) -> None:
    """The scan's history join of the pool's band keys, less the pool's own contents: as a
    plain join, left to the planner (a hash join over a sequential scan of the band table),
    and as the product writes it (`index_store.HISTORY_JOIN_SQL`: one probe of the band
    table's primary key per key), alternating; the two must find the same rows."""
    import psycopg

    from near_dedup_core.index_store.postgres import HISTORY_JOIN_SQL

    done: dict[str, Any] = state.data.setdefault("plan", {})
    url = server.url(HISTORY_DB)
    with psycopg.connect(url) as con:
        pool_batch = con.execute("SELECT batch FROM packages WHERE package_id = %s",
                                 (args.pool,)).fetchone()[0]
        lo, hi = con.execute("SELECT min(id), max(id) FROM contents WHERE batch = %s",
                             (pool_batch,)).fetchone()
        keys = [k for (k,) in con.execute("SELECT DISTINCT key FROM bands WHERE content "
                                          "BETWEEN %s AND %s ORDER BY 1", (lo, hi))]
    statements = {
        "plain": ("SELECT b.key, b.content FROM scan_keys q JOIN bands b ON b.key = q.key "
                  "WHERE NOT EXISTS (SELECT 1 FROM scan_contents c WHERE c.id = b.content)"),
        "product": HISTORY_JOIN_SQL,
    }
    timings: dict[str, list[float]] = {mode: [] for mode in statements}
    for _r in range(args.rounds):
        for mode, sql in statements.items():
            with psycopg.connect(url) as con:
                con.execute("CREATE TEMP TABLE scan_keys (key BIGINT PRIMARY KEY)")
                con.execute("CREATE TEMP TABLE scan_contents (id BIGINT PRIMARY KEY)")
                with con.cursor() as cur:
                    with cur.copy("COPY scan_keys (key) FROM STDIN") as copy:
                        for k in keys:
                            copy.write_row((k,))
                con.execute("INSERT INTO scan_contents SELECT generate_series(%s::bigint, "
                            "%s::bigint)", (lo, hi))
                con.execute("ANALYZE scan_keys")
                done[f"plan-{mode}"] = [r[0] for r in con.execute("EXPLAIN " + sql)][:4]
                t0 = time.monotonic()
                done[f"rows-{mode}"] = len(con.execute(sql).fetchall())
                timings[mode].append(round(time.monotonic() - t0, 2))
                con.rollback()
            print(f"[{wall_clock()}] plan {mode}: {timings[mode][-1]} s", flush=True)
    if done["rows-plain"] != done["rows-product"]:
        raise SystemExit(f"history: the joins found {done['rows-plain']} and "
                         f"{done['rows-product']} rows")
    done.update(probe_keys=len(keys), timings_s=timings)
    state.save()


# --------------------------------------------------------------------------- report


def summary(state: State, pool: str) -> None:
    d = state.data
    built = d["built"]
    if not built:
        return
    records = sum(b["records"] for b in built)
    nbytes = sum(b["text_bytes"] for b in built)
    last = built[-1]
    print(f"\nhistory: {len(built)} batches, {records:,} records, {nbytes / 1e9:.2f} GB of text "
          f"(mean {nbytes / records:,.0f} B)")
    print("| batch | generate s | SQLite index s | PostgreSQL index s | SQLite GB | PostgreSQL GB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in built:
        print(f"| {b['batch']} | {b['generate_s']:.0f} | {b['sqlite_index_s']:.0f} | "
              f"{b['postgresql_index_s']:.0f} | {b['sqlite_bytes'] / 1e9:.2f} | "
              f"{b['postgresql_bytes'] / 1e9:.2f} |")
    print(f"index bytes per text byte: SQLite {last['sqlite_bytes'] / nbytes:.3f}, PostgreSQL "
          f"{last['postgresql_bytes'] / nbytes:.3f}")
    m = d["measure"]
    for side in ("sqlite", "postgresql"):
        if f"day-{side}-empty-2" in m:
            e = statistics.mean([m[f"day-{side}-empty-1"], m[f"day-{side}-empty-2"]])
            print(f"{side}: day N+1 append {m[f'day-{side}-history']:.1f} s to the history, "
                  f"{e:.1f} s to an empty index (×{m[f'day-{side}-history'] / e:.2f})")
        if f"{pool}-{side}-history-index" in m:
            print(f"{side}: pool append {m[f'{pool}-{side}-history-index']:.1f} s to the "
                  f"history, {m[f'{pool}-{side}-empty-index']:.1f} s to an empty index")
        hist = [v for k, v in m.items() if k.startswith(f"scan-{pool}-{side}-history-")]
        emp = [v for k, v in m.items() if k.startswith(f"scan-{pool}-{side}-empty-")]
        if hist and emp:
            h, e = statistics.median(hist), statistics.median(emp)
            print(f"{side}: scan of the pool {h:.1f} s with the history, {e:.1f} s with only "
                  f"the pool (×{h / e:.2f}; runs {hist} / {emp})")
    for round_name in sorted(k for k in d if k.startswith("layout")):
        layout_summary(round_name, d[round_name])
    if d["partition"].get("median_s"):
        print(f"partition: {orjson.dumps(d['partition'], option=orjson.OPT_INDENT_2).decode()}")


def layout_summary(round_name: str, lay: dict[str, Any]) -> None:
    for label in ("day-b", "day-c", "fold"):
        for side in ("sqlite", "postgresql"):
            if f"{label}-{side}-empty-2" not in lay:
                continue
            e = statistics.mean([lay[f"{label}-{side}-empty-1"], lay[f"{label}-{side}-empty-2"]])
            h = lay[f"{label}-{side}-history"]
            print(f"{round_name} {label} {side}: append {h:.1f} s to the history, {e:.1f} s to an "
                  f"empty index (×{h / e:.2f}); after it {lay[f'{label}-{side}-history-layout']}")
        for side in ("sqlite", "postgresql"):
            hist = [v for k, v in lay.items()
                    if re.fullmatch(rf"{label}-scan-{side}-history-\d+", k)]
            emp = [v for k, v in lay.items() if re.fullmatch(rf"{label}-scan-{side}-empty-\d+", k)]
            if hist and emp:
                h, e = statistics.median(hist), statistics.median(emp)
                print(f"{round_name} {label} {side}: scan {h:.1f} s against the history, {e:.1f} s "
                      f"against the pool alone (×{h / e:.2f}; runs {hist} / {emp})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.history", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "history")
    p.add_argument("--pg-root", type=Path, default=Path("/tmp/near-dedup-history-pg"))
    p.add_argument("--millions", type=int, default=10, help="history batches to build")
    p.add_argument("--batch-records", type=int, default=1_000_000)
    p.add_argument("--min-len", type=int, default=200)
    p.add_argument("--max-len", type=int, default=800)
    p.add_argument("--min-free-gb", type=float, default=15.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--max-wal-size", default=PG_SETTINGS["max_wal_size"],
                   help="the server's max_wal_size (WAL kept on disk between checkpoints)")
    p.add_argument("--pool", default="pool-100k-mosaic-rot13",
                   help="bench.build_corpus package scanned against the history")
    p.add_argument("--layout-days", nargs=3, default=["day-1m-b", "day-1m-c", "day-1m-fold"],
                   help="layout: day N+1, day N+2 and the fold day (bench.build_corpus packages "
                        "of new content)")
    p.add_argument("--layout-seed", type=int, default=90,
                   help="layout: the mosaic seed of the first fill batch")
    p.add_argument("--layout-round", default="",
                   help="layout: a suffix for a further round's results in state.json")
    p.add_argument("--days", nargs="+", default=["day-1m-g", "day-1m-h"],
                   help="days: the day packages to append")
    p.add_argument("--steps", nargs="+", default=["build", "measure", "partition"],
                   choices=["build", "measure", "layout", "days", "scans", "partition", "plan"])
    args = p.parse_args(argv)
    os.chdir(ROOT)  # bench.build_corpus builds its packages under bench/out/pkg
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    state = State(args.out / "state.json")
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("history: PostgreSQL binaries not found: apt-get install postgresql")
    server = PostgresServer(bindir, root=args.pg_root,
                            settings={**PG_SETTINGS, "max_wal_size": args.max_wal_size})
    try:
        import psycopg

        with psycopg.connect(host=str(server.root), port=server.port, user="postgres",
                             dbname="postgres", autocommit=True) as con:
            if not con.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                               (HISTORY_DB,)).fetchone():
                con.execute(f"CREATE DATABASE {HISTORY_DB} TEMPLATE template0")
        if "build" in args.steps:
            build(args, state, server)
        if "measure" in args.steps:
            measure(args, state, server)
        if "layout" in args.steps:
            layout(args, state, server)
        if "days" in args.steps:
            days(args, state, server)
        if "scans" in args.steps:
            scans(args, state, server)
        if "partition" in args.steps:
            partition(args, state, server)
        if "plan" in args.steps:
            plan(args, state, server)
    finally:
        server.stop()
    summary(state, args.pool)


if __name__ == "__main__":
    main()
