"""A generated history for an Iceberg index, and the scans measured against it (bench only).

The history a scan meets at 10^8 contents cannot be indexed on this machine from real text in
the time a benchmark has, so this generator writes it directly, through pyiceberg, in the
index's own layout; only the real pool (and the next day's package) go through `near-dedup`.

Subcommands:

- ``append --index iceberg:///folder --contents N``: appends one batch of ``N`` generated
  contents to an existing index (created by ``near-dedup index``, whose binding, scopes and
  config it keeps): a ``batches`` and a ``packages`` row, ``N`` ``contents`` rows (random
  16-bit signature values, the low halves of MinHash minima, which are uniform; ``norm_chars``
  and ``shingles`` drawn from the index's own long contents; no text), ``N`` ``sources`` rows
  and ``N`` × bands ``bands`` rows, one file per band-key bucket, sorted by key, random keys
  of the bucket and random content ids of the batch. The files are written as the writer
  writes them (`iceberg.batch.write_band_files`, the tables' row groups and codecs),
  registered by pyiceberg ``add_files``/``append`` and published by one ``commits`` row
  (`iceberg.batch.publish`) under the writer's lock. The generated keys are random, not
  derived from the signatures: no band key of a real text meets one (probability ~10^-3 for
  a 1M pool against 10^8 contents), so no scan reaches a generated content and none needs a
  text. No ``raw_texts`` rows are written (only ``index`` reads them).
- ``bands --out FOLDER --contents N --buckets B [--only K]``: the band table alone, as
  Parquet files (one per bucket, the same rows as ``append`` writes, in the writer's layout
  `iceberg.batch.BAND_FILE_OPTIONS`): for a history whose
  other tables do not fit the disk; with ``--only``, its first K buckets (a sample: every
  bucket holds the same number of rows, drawn the same way).
- ``join --probes iceberg:///pool-index (--index iceberg:///… | --bands FOLDER)``: the
  history join of a scan, task by task: the distinct band keys of the probe index (a pool
  indexed alone) joined with each bucket's files by the scan's own task
  (`iceberg.snapshot.bucket_hits`), on one thread; prints each bucket's time and the
  distribution.
- ``run --pool PKG [--day PKG] --contents N --out FOLDER``: the whole comparison, in one run:
  the pool indexed by ``near-dedup index`` into two new indexes (``NEAR_DEDUP_ICEBERG_BUCKETS``
  from ``--buckets``; the history's first, then the empty one's while ``N`` generated
  contents are appended to the history), then in turns the pool's ``near-dedup scan``
  against the first (the empty index: the pool only) and against the second, then the day's
  ``index`` + ``scan`` on each (without ``--day``: none; ``day`` runs one later); bytes per
  content of each table; the per-bucket join on the history; the load average beside every
  figure. Written to ``FOLDER/result.json``.
- ``scans --pool PKG --out FOLDER [--rounds R] [--before CHECKOUT]``: more rounds of the
  pool's scans, in turns, on the two indexes of an earlier ``run`` in FOLDER (which then hold
  the day as well), or of a day's package they hold; with ``--before``, both indexes scanned
  by that checkout's code as well (earlier code, its kernels' caches warm:
  docs/benchmarks.md, "Reproducing").
- ``find --day PKG --queries N --out FOLDER [--rounds R] [--before CHECKOUT]``:
  ``near-dedup index find --jsonl`` of the package's first N texts (as `bench.find` makes
  its queries) on the two indexes of an earlier ``run``, in turns; the answers must be the
  same on both; with ``--before``, the history asked by that checkout's code as well.
- ``day --day PKG --out FOLDER [--maintain]``: another day on an earlier ``run``'s indexes,
  then (``--maintain``) ``index compact`` + ``index expire`` on each; ``maintain --out
  FOLDER``: those alone. ``--hold-buckets``: the band bucket count kept (no growth).
- ``keys --out FOLDER``: the ``content_keys`` of both indexes of an earlier ``run`` laid out
  again as ``near-dedup index compact`` lays them out (`iceberg.compact.compact_keys`: one
  file a bucket, in this code's layout), published, the band table left as it is (its
  compaction would rewrite the whole table, which the disk may not hold twice).

::

    python -m bench.scale_history run --pool bench/out/pool-1m --day bench/out/pkg/day-1m \
        --contents 30000000 --buckets 1024 --out bench/out/scale
    python -m bench.scale_history bands --out bench/out/scale-bands --contents 100000000 \
        --buckets 1024 --only 128 --first 1000001
    python -m bench.scale_history join --probes iceberg://$PWD/bench/out/scale/empty \
        --bands bench/out/scale-bands
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue

from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.batch import (
    BAND_FILE_OPTIONS,
    BandSpec,
    open_for_write,
    publish,
    to_arrow,
    write_band_files,
)
from near_dedup_core.index_store.iceberg.keyed import bits_for, write_keyed_files
from near_dedup_core.index_store.iceberg.snapshot import IcebergSnapshot, Pinned, bucket_hits
from near_dedup_core.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")
#: Rows per generated contents/sources data file.
FILE_ROWS = 1 << 20
#: Buckets whose band rows are generated and written at a time (memory: ~20 bytes a row).
BUCKET_GROUP = 16
CONTENT_ID_BYTES = 16
SHA_BYTES = 32
CREATED_AT = "2026-11-28T00:00:00Z"
THREADS = 2


#: Whether the generators show their progress on stderr (``--quiet``: not).
PROGRESS = {"enabled": True}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- generated rows
def binary(data: bytes, n: int, width: int) -> pa.Array:
    """``n`` binary values of ``width`` bytes each, cut from ``data``."""
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])


def plain(table: pa.Table) -> pa.Table:
    """The table without Iceberg field ids (``add_files`` takes files without them)."""
    return table.cast(pa.schema([pa.field(f.name, f.type) for f in table.schema]))


def bucket_rows(bucket: int, buckets: int, rows: int, first: int, last: int, seed: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` band rows of ``bucket``: random 63-bit keys whose bucket (key modulo
    ``buckets``) is ``bucket``, and random contents in ``first``..``last``; sorted by (key,
    content) as a batch writes them."""
    rng = np.random.default_rng([seed, bucket])
    raw = rng.integers(0, (1 << 63) - buckets, rows, dtype=np.int64)
    keys = raw - raw % buckets + bucket
    contents = rng.integers(first, last + 1, rows, dtype=np.int64)
    order = np.lexsort((contents, keys))
    return keys[order], contents[order]


def rows_per_bucket(total: int, buckets: int) -> list[int]:
    base, extra = divmod(total, buckets)
    return [base + (1 if b < extra else 0) for b in range(buckets)]


def band_groups(contents: int, bands: int, buckets: int, first: int, seed: int,
                only: int | None = None):
    """The band rows of ``contents`` generated contents from id ``first``, `BUCKET_GROUP`
    buckets at a time, as arrow tables (bucket, key, content) sorted by bucket then key;
    of the first ``only`` buckets alone when given. The rows generated show on stderr as the
    CLI's progress does (``--quiet``: not)."""
    counts = rows_per_bucket(contents * bands, buckets)
    last = first + contents - 1
    schema = it.arrow_schema("bands")
    end = buckets if only is None else min(only, buckets)
    bar = Progress("history: band rows", sum(counts[:end]), enabled=PROGRESS["enabled"])
    for start in range(0, end, BUCKET_GROUP):
        group = range(start, min(start + BUCKET_GROUP, end))
        with ThreadPoolExecutor(THREADS) as threads:
            parts = list(threads.map(
                lambda b: bucket_rows(b, buckets, counts[b], first, last, seed), group))
        bucket = np.concatenate([np.full(counts[b], b, np.int32) for b in group])
        yield pa.Table.from_arrays([pa.array(bucket), pa.array(np.concatenate(
            [k for k, _ in parts])), pa.array(np.concatenate([c for _, c in parts]))],
            schema=schema)
        bar.advance(len(bucket))
    bar.finish()


def content_files(first: int, n: int, num_perm: int, scope: int, batch: int,
                  sizes: np.ndarray, seed: int):
    """``contents`` rows ``first``..``first + n - 1``, `FILE_ROWS` a table."""
    rng = np.random.default_rng([seed, 1])
    schema = it.arrow_schema("contents")
    for start in range(0, n, FILE_ROWS):
        m = min(FILE_ROWS, n - start)
        pick = sizes[rng.integers(0, len(sizes), m)]
        yield pa.Table.from_arrays([
            pa.array(np.arange(first + start, first + start + m, dtype=np.int64)),
            binary(rng.bytes(m * CONTENT_ID_BYTES), m, CONTENT_ID_BYTES),
            pa.array(np.full(m, scope, np.int64)),
            pa.array(np.full(m, batch, np.int64)),
            pa.array(pick[:, 0]), pa.array(pick[:, 1]),
            binary(rng.integers(0, 1 << 16, (m, num_perm), dtype=np.uint16).tobytes(), m,
                   2 * num_perm),
            pa.nulls(m, pa.binary()), pa.nulls(m, pa.int64())], schema=schema)


def source_files(first_source: int, first_content: int, n: int, package: int, seed: int):
    """One ``sources`` row per generated content, `FILE_ROWS` a table, as a package of
    shards of 100,000 records would give them."""
    rng = np.random.default_rng([seed, 2])
    schema = it.arrow_schema("sources")
    for start in range(0, n, FILE_ROWS):
        m = min(FILE_ROWS, n - start)
        pos = np.arange(start, start + m, dtype=np.int64)
        content = pa.array(pos + first_content)
        yield pa.Table.from_arrays([
            pa.array(pos + first_source), content, pa.array(np.full(m, package, np.int64)),
            pc.binary_join_element_wise("h-", content.cast(pa.string()), ""),
            pa.array(["train"]).take(pa.array(np.zeros(m, np.int32))),
            pc.binary_join_element_wise(
                "data/train/part-", pc.utf8_lpad(pa.array(pos // 100_000).cast(
                    pa.string()), 5, "0"), ".jsonl", ""),
            pa.array(pos % 100_000 + 1), pa.array(pos),
            binary(rng.bytes(m * SHA_BYTES), m, SHA_BYTES),
            pa.nulls(m, pa.string()), pa.nulls(m, pa.string())], schema=schema)


def write_files(table, tables, folder: str, compression: str, row_group: int) -> list[str]:
    """Each of ``tables`` as one Parquet file under ``table``'s data folder; their URIs."""
    data = Path(it.local_path(table.location())) / "data"
    data.mkdir(parents=True, exist_ok=True)
    uris = []
    for k, t in enumerate(tables):
        path = data / f"{folder}-{k:05d}.parquet"
        pq.write_table(plain(t), path, compression=compression, row_group_size=row_group)
        uris.append(f"file://{path}")
    return uris


def append(location: str, contents: int, seed: int = 1) -> dict:
    """Append one batch of ``contents`` generated contents to the index at ``location``
    (module doc); what was written."""
    started = time.perf_counter()
    with it.writer(it.where(location)) as cat:
        pinned, fresh = open_for_write(location, cat)
        if fresh:
            raise SystemExit(f"{location}: index a real package first (near-dedup index)")
        meta = dict(pinned.rows("meta", ("key", "value")))
        config = orjson.loads(meta["config"])
        num_perm, bands, min_chars = (int(config[k]) for k in ("num_perm", "bands",
                                                               "min_chars"))
        buckets = int(meta[it.BUCKETS_KEY])
        seq = max(s for (s,) in pinned.rows("batches", ("seq",))) + 1
        package_rowid = max(i for (i,) in pinned.rows("packages", ("id",))) + 1
        scope = min(i for (i,) in pinned.rows("scopes", ("id",)))
        real = pinned.read("contents", ("id", "norm_chars", "shingles"))
        first = int(pc_max(real.column("id"))) + 1
        long = real.filter(pc.greater_equal(real.column("norm_chars"), min_chars))
        sizes = np.stack([long.column("norm_chars").to_numpy(),
                          long.column("shingles").to_numpy()], axis=1)
        first_source = pinned.total_records("sources") + 1
        package_id = f"history-{seq}-{contents}"
        manifest = orjson.dumps({"package_id": package_id, "kind": meta.get("kind", "cpt"),
                                 "generated": {"contents": contents, "seed": seed}}).decode()
        snapshots = dict(pinned.state.snapshots)
        tables = pinned.tables

        def committed(name: str) -> None:
            current = tables[name].current_snapshot()
            assert current is not None
            snapshots[name] = current.snapshot_id

        small: dict[str, list[tuple]] = {
            "batches": [(seq, CREATED_AT, "generated", orjson.dumps([package_id]).decode())],
            "packages": [(package_rowid, package_id, meta.get("kind", "cpt"),
                          hashlib.sha256(manifest.encode()).hexdigest(), seq, contents,
                          manifest)]}
        for name, rows in small.items():
            tables[name].append(to_arrow(name, rows))
            committed(name)
        tag = f"history-{seq}"
        t = time.perf_counter()
        keys: list[pa.Table] = []

        def kept(parts):
            for part in parts:
                keys.append(part.select(["content_id", "id"]))
                yield part

        uris = write_files(tables["contents"], kept(content_files(
            first, contents, num_perm, scope, seq, sizes, seed)), tag, "none",
            it.ROW_GROUP_ROWS["contents"])
        tables["contents"].add_files(uris, check_duplicate_files=False)
        committed("contents")
        contents_s = time.perf_counter() - t
        # the content ids as `index compact` lays them out for the index's size
        t = time.perf_counter()
        if "content_keys" in tables:
            total = pinned.total_records("contents") + contents
            rows = pa.concat_tables(keys)
            del keys[:]
            if pinned.total_records("content_keys"):
                rows = pa.concat_tables([pinned.read("content_keys", ("content_id", "id")),
                                         rows])
            uris = write_keyed_files(tables["content_keys"], "content_keys", tag,
                                     "content_id", rows, bits_for(total))
            del rows
            with tables["content_keys"].transaction() as tx:
                if pinned.total_records("content_keys"):
                    tx.delete(AlwaysTrue())
                tx.add_files(uris, check_duplicate_files=False)
            committed("content_keys")
        keys_s = time.perf_counter() - t
        t = time.perf_counter()
        uris = write_files(tables["sources"], source_files(
            first_source, first, contents, package_rowid, seed), tag, "zstd", 1 << 20)
        tables["sources"].add_files(uris, check_duplicate_files=False)
        committed("sources")
        sources_s = time.perf_counter() - t
        t = time.perf_counter()
        uris = []
        spec = BandSpec(f"{tables['bands'].location().rstrip('/')}/data",
                        dict(tables["bands"].io.properties), tag, buckets)
        for group in band_groups(contents, bands, buckets, first, seed):
            uris += [f.path for f in write_band_files(
                spec, group.column("key").to_numpy(), group.column("content").to_numpy())]
        tables["bands"].add_files(uris, check_duplicate_files=False)
        committed("bands")
        bands_s = time.perf_counter() - t
        publish(pinned, "batch", CREATED_AT, snapshots)
    return {"contents": contents, "first_content": first, "batch": seq, "buckets": buckets,
            "band_rows": contents * bands, "band_files": len(uris),
            "contents_s": round(contents_s, 1), "content_keys_s": round(keys_s, 1), "sources_s": round(sources_s, 1),
            "bands_s": round(bands_s, 1), "total_s": round(time.perf_counter() - started, 1),
            "load": load()}


def pc_max(column: pa.ChunkedArray) -> int:
    value = pc.max(column).as_py()
    return 0 if value is None else int(value)


def bands_only(out: Path, contents: int, buckets: int, bands: int = 16, first: int = 1,
               seed: int = 1, only: int | None = None) -> dict:
    """The band rows of ``contents`` generated contents as one Parquet file per bucket under
    ``out`` (``bucket=B/part.parquet``), written as a batch writes them; of the first
    ``only`` buckets alone when given (a sample of the table: every bucket holds the same
    number of rows drawn the same way). ``out/bands.json`` records what was written."""
    started = time.perf_counter()
    out.mkdir(parents=True)
    for group in band_groups(contents, bands, buckets, first, seed, only):
        column = group.column("bucket").to_numpy()
        cuts = np.flatnonzero(np.diff(column)) + 1
        starts = np.concatenate(([0], cuts)).tolist()
        ends = np.concatenate((cuts, [len(column)])).tolist()
        group = plain(group)

        def write(part: tuple[int, int], group: pa.Table = group,
                  column: np.ndarray = column) -> None:
            a, b = part
            path = out / f"bucket={int(column[a])}" / "part.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(group.slice(a, b - a), path, **BAND_FILE_OPTIONS)

        with ThreadPoolExecutor(THREADS) as threads:
            list(threads.map(write, zip(starts, ends, strict=True)))
    written = min(only or buckets, buckets)
    result = {"contents": contents, "buckets": buckets, "band_rows": contents * bands,
              "buckets_written": written,
              "rows_written": sum(rows_per_bucket(contents * bands, buckets)[:written]),
              "bytes": folder_bytes(out), "write_s": round(time.perf_counter() - started, 1),
              "load": load()}
    (out / "bands.json").write_bytes(orjson.dumps(result))
    return result


# -- the join, task by task
def probe_keys(location: str) -> tuple[np.ndarray, int]:
    """The distinct band keys of the index at ``location`` (a pool indexed alone), sorted,
    and its highest content id."""
    pinned = Pinned(location)
    keys = np.unique(pinned.read("bands", ("key",)).column("key").to_numpy())
    return keys, pc_max(pinned.read("contents", ("id",)).column("id"))


def join(probes: np.ndarray, pool_last: int, tasks: list[tuple[list[str], np.ndarray]]
         ) -> dict:
    """Each task (bucket files, sorted probe keys) run by `bucket_hits` on this thread, the
    pool's contents 1..``pool_last`` left out as a scan leaves them; the times, wall and CPU
    of this process (Arrow's decoding threads included)."""
    times, cpu, hits, load_before = [], [], 0, load()
    for paths, mine in tasks:
        t, c = time.perf_counter(), time.process_time()
        keys, _ = bucket_hits(paths, mine, np.zeros(0, np.int64), 1, pool_last)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        hits += len(keys)
    arr = np.asarray(times)
    cpu_arr = np.asarray(cpu)
    rows = sum(pq.ParquetFile(it.local_path(p)).metadata.num_rows
               for paths, _ in tasks for p in paths)
    return {"tasks": len(tasks), "probes": len(probes), "hits": hits, "band_rows": rows,
            "total_s": round(float(arr.sum()), 2),
            "rows_per_s": round(rows / max(float(arr.sum()), 1e-9)),
            "p10_s": round(float(np.percentile(arr, 10)), 4),
            "median_s": round(float(np.median(arr)), 4),
            "p90_s": round(float(np.percentile(arr, 90)), 4),
            "p99_s": round(float(np.percentile(arr, 99)), 4),
            "max_s": round(float(arr.max()), 4), "min_s": round(float(arr.min()), 4),
            "cpu_total_s": round(float(cpu_arr.sum()), 2),
            "cpu_rows_per_s": round(rows / max(float(cpu_arr.sum()), 1e-9)),
            "cpu_median_s": round(float(np.median(cpu_arr)), 4),
            "cpu_p99_s": round(float(np.percentile(cpu_arr, 99)), 4),
            "load_before": load_before, "load_after": load()}


def index_tasks(location: str, probes: np.ndarray, timings: dict | None = None
                ) -> list[tuple[list[str], np.ndarray]]:
    """The scan's tasks on the index at ``location``; in ``timings``, the driver's seconds to
    pin its state (`IcebergSnapshot`: the small tables and every content id) and to plan the
    tasks (the band table's data files, the probes cut by bucket)."""
    t = time.perf_counter()
    snap = IcebergSnapshot(Pinned(location))
    pinned_s = time.perf_counter() - t
    t = time.perf_counter()
    tasks = snap.bucket_tasks(probes)
    if timings is not None:
        timings.update(pin_s=round(pinned_s, 2), plan_s=round(time.perf_counter() - t, 2))
    return tasks


def folder_tasks(folder: Path, probes: np.ndarray) -> list[tuple[list[str], np.ndarray]]:
    from near_dedup_core.index_store.iceberg.bands import bucket_of

    parts = sorted(folder.glob("bucket=*/*.parquet"), key=lambda p: int(
        p.parent.name.split("=")[1]))
    buckets = orjson.loads((folder / "bands.json").read_bytes())["buckets"]
    of = bucket_of(probes, buckets)
    return [([str(p)], probes[of == int(p.parent.name.split("=")[1])]) for p in parts]


# -- the comparison
def table_bytes(folder: Path) -> dict[str, int]:
    base = folder / it.WAREHOUSE / it.NAMESPACE
    return {p.name: folder_bytes(p / "data") for p in sorted(base.iterdir())
            if (p / "data").is_dir()}


def cli_run(name: str, args: list[str], index: str, out: Path, buckets: int,
            code: Path | None = None, held: bool = False, said: bool = False) -> dict:
    """The CLI of this checkout (or of the checkout ``code``: run in its folder, on its
    ``PYTHONPATH``; ``held``: as `HELD_CLI`) on ``index``, measured (``said``: its output)."""
    from bench.measure import run

    env = {**os.environ, it.BUCKETS_ENV: str(buckets)}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cli = [sys.executable, *(("-c", HELD_CLI) if held else ("-m", "near_dedup_core")),
           "--quiet", "--config", str(CONFIG), "--index", index]
    before = load()
    m = run([*cli, *args], out / f"{name}.log", cwd=code, env=env)
    if m.returncode:
        raise SystemExit(f"{name} failed: {m.stderr_tail}")
    return {"wall_s": round(m.wall_s, 1), "cpu_s": round(m.cpu_s, 1),
            "peak_tree_rss_mib": round(m.peak_tree_rss_mib), "load_before": before,
            "load_after": load(), "box": m.box.note(), **({"said": m.stdout} if said else {})}


def scan(name: str, index: str, pool: Path, out: Path, buckets: int, workers: int,
         code: Path | None = None) -> tuple[dict, dict[str, bytes]]:
    from bench.measure import read_through

    read_through(pool)
    report = out / f"report-{name}"
    shutil.rmtree(report, ignore_errors=True)
    figures = cli_run(f"{name}-scan", ["scan", "--inputs", str(pool), "--output", str(report),
                                       "--workers", str(workers)], index, out, buckets, code)
    return figures, {f: (report / f).read_bytes() for f in REPORT_FILES}


def run_all(pool: Path, day: Path | None, contents: int, buckets: int, out: Path, workers: int,
            rounds: int) -> dict:
    from bench.measure import code_version, read_through

    out.mkdir(parents=True, exist_ok=True)
    sides = {"empty": out / "empty", "history": out / "history"}
    for path in sides.values():
        shutil.rmtree(path, ignore_errors=True)
    result: dict = {"pool": str(pool), "day": str(day) if day else None, "contents": contents,
                    "buckets": buckets, "workers": workers,
                    "code": code_version(ROOT), "index": {}, "scans": [], "day_runs": {}}

    def save() -> None:
        (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))

    def index_pool(side: str) -> None:
        read_through(pool)
        result["index"][side] = cli_run(f"{side}-index", ["index", "--inputs", str(pool),
                                                          "--workers", str(workers)],
                                        f"iceberg://{sides[side]}", out, buckets)
        save()

    # the history side first: its generated contents are written while the pool is indexed
    # into the empty side (the two pool `index` figures are not compared)
    index_pool("history")
    with ThreadPoolExecutor(1) as side_job:
        empty = side_job.submit(index_pool, "empty")
        result["generated"] = append(f"iceberg://{sides['history']}", contents)
        empty.result()
    result["bytes"] = {side: table_bytes(path) for side, path in sides.items()}
    save()
    reports = {}
    for k in range(rounds):
        for side, path in sides.items():
            figures, reports[side] = scan(side, f"iceberg://{path}", pool, out, buckets,
                                          workers)
            result["scans"].append({"round": k + 1, "side": side, **figures})
            save()
    if rounds:
        result["reports_identical"] = reports["empty"] == reports["history"]
    probes, pool_last = probe_keys(f"iceberg://{sides['empty']}")
    timings: dict = {}
    tasks = index_tasks(f"iceberg://{sides['history']}", probes, timings)
    result["join"] = {**join(probes, pool_last, tasks), **timings}
    save()
    if day is None:
        return result
    result["day_runs"], result["day_reports_identical"] = day_runs(day, out, buckets, workers,
                                                                   save)
    save()
    return result


def day_runs(day: Path, out: Path, buckets: int, workers: int, save=lambda: None
             ) -> tuple[dict, bool]:
    """The package ``day`` indexed and scanned on the two indexes of a run in ``out``, in
    turns: the figures of each side, and whether the reports are byte-identical."""
    from bench.measure import read_through

    runs: dict = {}
    reports = {}
    for side in ("empty", "history"):
        index = f"iceberg://{out / side}"
        read_through(day)
        ix = cli_run(f"{side}-{day.name}-index", ["index", "--inputs", str(day), "--workers",
                                                  str(workers)], index, out, buckets)
        sc, reports[side] = scan(f"{side}-{day.name}", index, day, out, buckets, workers)
        runs[side] = {"index": ix, "scan": sc}
        save()
    return runs, reports["empty"] == reports["history"]


#: `near-dedup` with the band buckets held at the index's count (`maintained`'s ``hold``).
HELD_CLI = ("import sys; from near_dedup_core.index_store.iceberg import bands; bands.BUCKET_ROWS"
            " = 1 << 62; from near_dedup_core import cli; sys.exit(cli.main(sys.argv[1:]))")


def maintained(out: Path, buckets: int, name: str, hold: bool = False) -> dict:
    """`index compact` then `index expire` on both indexes of a run in ``out``, in turns,
    measured; ``hold``: the band buckets kept at their count."""
    done: dict = {}
    for side in ("empty", "history"):
        index = f"iceberg://{out / side}"
        figures = {}
        for action in ("compact", "expire"):
            figures[action] = cli_run(f"{side}-{name}-{action}", ["index", action], index, out,
                                      buckets, held=hold, said=True)
        done[side] = figures
    return done


def more_days(day: Path, out: Path, buckets: int, workers: int, maintain: bool = False,
              hold: bool = False) -> dict:
    """`day_runs` of another day on the indexes of an earlier `run_all` in ``out`` (then
    `maintained`), added to ``out/result.json`` under ``more_days``."""
    result = orjson.loads((out / "result.json").read_bytes())
    runs, identical = day_runs(day, out, buckets, workers)
    if maintain:
        runs["maintenance"] = maintained(out, buckets, day.name, hold)
    entry = {"day": str(day), "reports_identical": identical, **runs}
    result.setdefault("more_days", []).append(entry)
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return entry


def scans(pool: Path, out: Path, buckets: int, workers: int, rounds: int,
          before: Path | None = None) -> dict:
    """The pool scanned against the two indexes of an earlier `run_all` in ``out``, in turns,
    ``rounds`` times; the figures added to ``out/result.json`` under ``more_scans``. With
    ``before`` (a checkout of earlier code, its kernels' caches warm), each round also scans
    both indexes with that code (``side`` ``empty-before``, ``history-before``): empty,
    history, empty-before, history-before, then the other way round in the next round; every
    report must be the same. ``pool`` may be a day's package the indexes hold (its scan as
    the daily release runs it, after its ``index``)."""
    sides = {"empty": (out / "empty", None), "history": (out / "history", None)}
    if before is not None:
        sides["empty-before"] = (out / "empty", before)
        sides["history-before"] = (out / "history", before)
    result = orjson.loads((out / "result.json").read_bytes())
    more = result.setdefault("more_scans", [])
    first = len(more) // len(sides)
    reports = {}
    for k in range(rounds):
        order = list(sides.items())
        for side, (path, code) in order if k % 2 == 0 else reversed(order):
            figures, reports[side] = scan(side, f"iceberg://{path}", pool, out, buckets,
                                          workers, code)
            more.append({"round": first + k + 1, "side": side,
                         **({} if code is None else {"code": str(code)}), **figures})
            (out / "result.json").write_bytes(orjson.dumps(result,
                                                           option=orjson.OPT_INDENT_2))
            print(more[-1], file=sys.stderr, flush=True)
        if any(r != reports["empty"] for r in reports.values()):
            raise SystemExit("the reports differ between the indexes or the checkouts")
    return {"more_scans": more}


def keys_laid_out(out: Path) -> dict:
    """`keys` (module doc): what `iceberg.compact.compact_keys` (``full``) did on each side."""
    from near_dedup_core.fsutil import utc_now
    from near_dedup_core.index_store.iceberg.compact import compact_keys

    done = {}
    for side in ("empty", "history"):
        location = f"iceberg://{out / side}"
        started = time.perf_counter()
        with it.writer(it.where(location)) as cat:
            pinned, _ = open_for_write(location, cat)
            snapshots = dict(pinned.state.snapshots)
            what = compact_keys(pinned, snapshots, pinned.data_files("content_keys"), True)
            if what is not None:
                publish(pinned, "compact", utc_now(), snapshots)
        done[side] = {"done": what, "s": round(time.perf_counter() - started, 1)}
    return done


def same_answers(jsonl: str) -> bytes:
    """``index find --json`` answers as the two indexes of a run share them: without the
    batches' numbers and dates (the history's batch of generated contents comes between the
    pool's and any later day's; the two indexes took the pool at different times)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k not in ("batch", "first_batch", "batch_date")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return b"\n".join(orjson.dumps(strip(orjson.loads(line)), option=orjson.OPT_SORT_KEYS)
                      for line in jsonl.splitlines() if line.strip())


def finds(day: Path, n: int, out: Path, workers: int, rounds: int,
          before: Path | None = None) -> dict:
    """``near-dedup index find --jsonl`` of the first ``n`` texts of the package ``day`` (as
    `bench.find` makes its queries) against the two indexes of an earlier `run_all` in
    ``out``, in turns, ``rounds`` times; the answers must be the same on both sides
    (`same_answers`). With ``before`` (a checkout of earlier code), each round also asks the
    history with that code (side ``history-before``). The
    figures added to ``out/result.json`` under ``finds``."""
    from bench.build_corpus import write_jsonl
    from bench.find import _queries
    from bench.measure import read_through, run

    lines = out / f"queries-{day.name}-{n}.jsonl"
    if not lines.is_file():
        write_jsonl(lines, _queries(day, n))
    result = orjson.loads((out / "result.json").read_bytes())
    entry: dict = {"queries": n, "from": str(day), "runs": []}
    sides: dict[str, tuple[str, Path | None]] = {"empty": ("empty", None),
                                                 "history": ("history", None)}
    if before is not None:
        sides["history-before"] = ("history", before)
        entry["before"] = str(before)
    answers: dict[str, set[bytes]] = {side: set() for side in sides}
    for k in range(rounds):
        order = list(sides.items())
        for side, (folder, code) in order if k % 2 == 0 else reversed(order):
            read_through(lines)
            loaded = load()
            env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
            m = run([sys.executable, "-m", "near_dedup_core", "--quiet", "--config",
                     str(CONFIG), "--index", f"iceberg://{out / folder}", "index", "find",
                     "--jsonl", str(lines), "--json", "--workers", str(workers)],
                    out / f"{side}-find.log", cwd=code, env=env)
            if m.returncode:
                raise SystemExit(f"{side} find failed: {m.stderr_tail}")
            answers[side].add(hashlib.sha256(same_answers(m.stdout)).digest())
            entry["runs"].append({"round": k + 1, "side": side, "wall_s": round(m.wall_s, 1),
                                  "cpu_s": round(m.cpu_s, 1),
                                  "peak_tree_rss_mib": round(m.peak_tree_rss_mib),
                                  "load_before": loaded, "load_after": load(),
                                  "box": m.box.note()})
            print(entry["runs"][-1], file=sys.stderr, flush=True)
    entry["answers_identical"] = len(set().union(*answers.values())) == 1
    result.setdefault("finds", []).append(entry)
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not entry["answers_identical"]:
        raise SystemExit("the answers against the history differ from the pool's alone")
    return entry


def built(package: Path) -> None:
    """A benchmark package of `bench.build_corpus` (``bench/out/pkg/<name>``) built if it is
    missing."""
    from bench.build_corpus import PACKAGES, PKG_DIR, ensure

    if not package.exists() and package.resolve().parent == PKG_DIR.resolve() \
            and package.name in PACKAGES:
        ensure(package.name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.scale_history",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("append", help="append generated contents to an Iceberg index")
    a.add_argument("--index", required=True)
    a.add_argument("--contents", type=int, required=True)
    a.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("bands", help="the band table alone, one Parquet file per bucket")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--contents", type=int, required=True)
    b.add_argument("--buckets", type=int, required=True)
    b.add_argument("--bands", type=int, default=16)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--first", type=int, default=1, help="the first generated content id")
    b.add_argument("--only", type=int, help="write the first ONLY buckets alone (a sample)")
    j = sub.add_parser("join", help="the per-bucket history join, task by task")
    j.add_argument("--probes", required=True, help="iceberg:/// index of the pool alone")
    where = j.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="iceberg:/// index holding the history")
    where.add_argument("--bands", type=Path, help="a folder written by `bands`")
    r = sub.add_parser("run", help="pool scans and a day against an empty index and a history")
    r.add_argument("--pool", type=Path, required=True)
    r.add_argument("--day", type=Path,
                   help="the next day's package (none: stop after the pool's scans; `day` "
                        "runs one later)")
    r.add_argument("--contents", type=int, required=True)
    r.add_argument("--buckets", type=int, default=1024)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--rounds", type=int, default=1)
    m = sub.add_parser("scans", help="more rounds of the pool's scans on a run's indexes")
    m.add_argument("--pool", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True, help="the folder of an earlier run")
    m.add_argument("--buckets", type=int, default=1024)
    m.add_argument("--workers", type=int, default=2)
    m.add_argument("--rounds", type=int, default=1)
    m.add_argument("--before", type=Path,
                   help="a checkout of earlier code that scans the history too, in turns")
    d = sub.add_parser("day", help="another day indexed and scanned on a run's indexes")
    d.add_argument("--day", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True, help="the folder of an earlier run")
    d.add_argument("--buckets", type=int, default=1024)
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--maintain", action="store_true",
                   help="then `index compact` and `index expire` on each index, measured")
    d.add_argument("--hold-buckets", action="store_true", help="see the module doc")
    c = sub.add_parser("maintain", help="`index compact` + `index expire` on a run's indexes")
    c.add_argument("--out", type=Path, required=True, help="the folder of an earlier run")
    c.add_argument("--buckets", type=int, default=1024)
    c.add_argument("--hold-buckets", action="store_true")
    f = sub.add_parser("find", help="`index find` of a day's texts on a run's indexes")
    f.add_argument("--day", type=Path, required=True, help="the package the queries come from")
    f.add_argument("--queries", type=int, default=10_000)
    f.add_argument("--out", type=Path, required=True, help="the folder of an earlier run")
    f.add_argument("--workers", type=int, default=2)
    f.add_argument("--rounds", type=int, default=1)
    f.add_argument("--before", type=Path,
                   help="a checkout of earlier code that asks the history too, in turns")
    k = sub.add_parser("keys", help="the content ids of a run's indexes laid out again")
    k.add_argument("--out", type=Path, required=True, help="the folder of an earlier run")
    args = ap.parse_args(argv)
    PROGRESS["enabled"] = not args.quiet
    for name in ("pool", "day"):
        package = getattr(args, name, None)
        if package is not None:
            built(package)
    if args.command == "keys":
        result = keys_laid_out(args.out.resolve())
    elif args.command == "find":
        result = finds(args.day.resolve(), args.queries, args.out.resolve(), args.workers,
                       args.rounds, args.before.resolve() if args.before else None)
    elif args.command == "day":
        result = more_days(args.day.resolve(), args.out.resolve(), args.buckets, args.workers,
                           args.maintain, args.hold_buckets)
    elif args.command == "maintain":
        result = maintained(args.out.resolve(), args.buckets, "maintain", args.hold_buckets)
    elif args.command == "scans":
        result = scans(args.pool.resolve(), args.out.resolve(), args.buckets, args.workers, args.rounds,
                       args.before.resolve() if args.before else None)
    elif args.command == "append":
        result = append(args.index, args.contents, args.seed)
    elif args.command == "bands":
        if args.out.exists():
            raise SystemExit(f"{args.out}: exists; give a new folder")
        result = bands_only(args.out, args.contents, args.buckets, args.bands, args.first,
                            args.seed, args.only)
    elif args.command == "join":
        probes, pool_last = probe_keys(args.probes)
        timings: dict = {}
        tasks = (index_tasks(args.index, probes, timings) if args.index
                 else folder_tasks(args.bands, probes))
        result = {**join(probes, pool_last, tasks), **timings}
    else:
        result = run_all(args.pool, args.day, args.contents, args.buckets, args.out.resolve(),
                         args.workers, args.rounds)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
