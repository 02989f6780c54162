"""Reliability trials through the CLI on real text: the counts of docs/reliability.md.

A pool package of ``--records`` texts (two or three stdlib docstring paragraphs each, every
fifth one a near copy of an earlier one) and a next version holding copies of 2,000 of its
texts plus new ones; v1 is indexed once, every trial works on a copy of that index.

- **concurrency** — ``scan v1`` started, ``index v2`` appended after a random delay
  (0–3 s, so the append lands in different stages of the scan): the report must equal the
  report of the scan before the append or of the scan after it, byte for byte.
- **kills** — ``index v2`` (``--workers 2``) or ``scan v1`` killed with SIGKILL or SIGTERM after
  a random delay: within 5 s no process of the command's session may survive; the index passes
  ``index check`` and is byte-identical to before (SIGKILL of a batch leaves at most a rolled-back
  WAL, removed by the next writer); no report and no temporary folder is published.
- **exhaustion** — ``index v2`` and ``scan v1`` under file-size limits (RLIMIT_FSIZE, SIGXFSZ
  ignored): one stderr line, exit 1, index and folder as before.
- **damage** — random garbage over 1–8 pages in the middle of the index: ``index v2``, ``scan``
  and ``index check`` each give one line, exit 1, no traceback.
- **leftovers** — refused and successful reads leave the index folder as it was.

Usage: ``python -m bench.reliability [--records 20000] [--trials 6] [--out bench/out/rel]``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import (  # noqa: E402 (tests/ on the path first)
    drop_every,
    make_package,
    reverse_every,
    stdlib_paragraphs,
)

from near_dedup_core.fsutil import sha256_file  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*argv: object, limit: int | None = None, **kw) -> subprocess.CompletedProcess:
    def pre() -> None:
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", *map(str, argv)],
                          env=ENV, capture_output=True, text=True, preexec_fn=pre, check=False,
                          **kw)


def corpus(out: Path, records: int) -> tuple[Path, Path]:
    paras = stdlib_paragraphs()
    rng = np.random.default_rng(11)
    texts: list[str] = []
    for i in range(records):
        if texts and i % 5 == 4:
            base = texts[int(rng.integers(0, len(texts)))]
            texts.append(reverse_every(base, 40) if i % 2 else drop_every(base, 50))
        else:
            k = int(rng.integers(2, 4))
            texts.append(" ".join(paras[j] for j in rng.choice(len(paras), k, replace=False)))
    v1 = make_package(out, "cpt-v1", {"train": [{"id": f"a{i}", "text": t}
                                                for i, t in enumerate(texts)]},
                      shard_records=10_000)
    new = [" ".join(paras[j] for j in rng.choice(len(paras), 3, replace=False))
           for _ in range(records // 4)]
    v2 = make_package(out, "cpt-v2", {"train": [{"id": f"b{i}", "text": t}
                                                for i, t in enumerate(texts[:2000] + new)]},
                      created_at="2026-11-26T00:00:00Z")
    return v1, v2


def folder_state(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) if p.is_file() else "dir" for p in sorted(folder.iterdir())}


def report_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def one_line(done: subprocess.CompletedProcess) -> bool:
    err = done.stderr
    return (done.returncode == 1 and err.count("\n") == 1
            and err.startswith("near-dedup: error: ") and "Traceback" not in err)


def session_alive(sid: int) -> list[int]:
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


class Table:
    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}

    def add(self, row: str, ok: bool, note: str = "") -> None:
        tried_ok = self.rows.setdefault(row, [0, 0])
        tried_ok[0] += 1
        tried_ok[1] += bool(ok)
        print(f"  {row}: {'ok' if ok else 'FAILED'} {note}", flush=True)

    def show(self) -> None:
        print("\n| case | tried | clean |\n|---|---:|---:|")
        for row, (tried, ok) in self.rows.items():
            print(f"| {row} | {tried} | {ok} ({100 * ok // max(tried, 1)} %) |")


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "rel")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    v1, v2 = corpus(out / "pkgs", args.records)
    base = out / "base" / "ix.sqlite"
    t = time.monotonic()
    assert cli("--index", base, "index", "--inputs", v1, "--workers", 2).returncode == 0
    print(f"indexed v1 ({args.records:,} records) in {time.monotonic() - t:.1f}s")
    work = out / "work"
    table = Table()

    def fresh() -> Path:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "ix").mkdir()
        shutil.copyfile(base, work / "ix" / "ix.sqlite")
        return work / "ix" / "ix.sqlite"

    # reference reports: before and after the append
    ix = fresh()
    t = time.monotonic()
    assert cli("--index", ix, "scan", "--inputs", v1, "--output", out / "before",
               "--workers", 2).returncode == 0
    scan_seconds = time.monotonic() - t
    t = time.monotonic()
    assert cli("--index", ix, "index", "--inputs", v2, "--workers", 2).returncode == 0
    seconds = {"scan": scan_seconds, "index": time.monotonic() - t}
    assert cli("--index", ix, "scan", "--inputs", v1, "--output", out / "after",
               "--workers", 2).returncode == 0
    before, after = report_bytes(out / "before"), report_bytes(out / "after")
    assert before != after
    print(f"scan of v1: {scan_seconds:.1f}s, index v2: {seconds['index']:.1f}s")

    print("concurrency: scan overlapping an append")
    for _ in range(args.trials):
        ix = fresh()
        rep = work / "rep"
        scan = subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                                 str(ix), "scan", "--inputs", str(v1), "--output", str(rep),
                                 "--workers", "2"], env=ENV, stderr=subprocess.PIPE, text=True)
        delay = rnd.uniform(0, min(3.0, scan_seconds))
        time.sleep(delay)
        appended = cli("--index", ix, "index", "--inputs", v2, "--workers", 2)
        _, err = scan.communicate()
        got = report_bytes(rep) if scan.returncode == 0 else None
        which = "before" if got == before else "after" if got == after else "NEITHER"
        table.add("concurrency: scan overlapping an append equals before/after",
                  appended.returncode == 0 and which != "NEITHER",
                  f"(append after {delay:.2f}s: {which}) {err.strip()}")

    print("kills")
    for k in range(2 * args.trials):
        ix = fresh()
        digest = sha256_file(ix)
        sig = (signal.SIGKILL, signal.SIGTERM)[k % 2]
        command = ("index", "scan")[(k // 2) % 2]
        argv = (["index", "--inputs", str(v2)] if command == "index"
                else ["scan", "--inputs", str(v1), "--output", str(work / "rep")])
        proc = subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                                 str(ix), *argv, "--workers", "2"], env=ENV,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        delay = rnd.uniform(0.3, 0.9) * seconds[command]  # somewhere in its run
        time.sleep(delay)
        running = len(session_alive(proc.pid))  # 5 in the parallel stage (pool of 2)
        finished = proc.poll() is not None
        if not finished:
            os.kill(proc.pid, sig)
        proc.wait()
        deadline = time.monotonic() + 5
        while session_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = session_alive(proc.pid)
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        check = cli("--index", ix, "index", "check")
        temps = [p.name for p in work.iterdir() if ".tmp-" in p.name]
        unchanged = finished or sha256_file(ix) == digest
        ok = (not survivors and check.returncode == 0 and unchanged
              and (finished or not (work / "rep").exists()) and (sig == signal.SIGKILL or not temps))
        table.add("kills: no survivor, index checks OK, nothing partial published", ok,
                  f"({command} {sig.name} after {delay:.1f}s, {running} processes"
                  f"{', had finished' if finished else ''}"
                  f"; survivors {survivors}; {check.stdout.strip() or check.stderr.strip()})")

    print("exhaustion: file-size limits")
    for k in range(args.trials):
        ix = fresh()
        state = folder_state(ix.parent)
        limit = rnd.choice([64, 256, 1024, 4096]) * 1024
        if k % 2 == 0:
            done = cli("--index", ix, "index", "--inputs", v2, "--workers", 2, limit=limit)
            what = "index v2"
        else:
            done = cli("--index", ix, "scan", "--inputs", v1, "--output", work / "rep",
                       "--workers", 2, limit=limit)
            what = "scan"
        ok = one_line(done) and folder_state(ix.parent) == state \
            and not (work / "rep").exists() \
            and not [p for p in work.iterdir() if ".tmp-" in p.name]
        table.add("exhaustion: one line, nothing changed", ok,
                  f"({what}, limit {limit // 1024} KiB: {done.stderr.strip()})")

    print("damage: garbage pages in the middle")
    for _ in range(args.trials):
        ix = fresh()
        page = 16384
        pages = ix.stat().st_size // page
        hit = sorted(rnd.sample(range(pages // 4, 3 * pages // 4), rnd.randint(1, 8)))
        with open(ix, "r+b") as fh:
            for p in hit:
                fh.seek(p * page + 64)
                fh.write(os.urandom(page - 128))
        for argv in (["index", "--inputs", v2], ["scan", "--inputs", v1, "--output",
                                                 work / "rep"], ["index", "check"]):
            done = cli("--index", ix, *argv, "--workers", 1) if argv[-1] != "check" \
                else cli("--index", ix, *argv)
            clean = one_line(done) or (done.returncode == 0 and argv[-1] != "check")
            table.add("damage: one line (or unaffected)", clean,
                      f"({argv[0]} {argv[-1] if argv[0] == 'index' else ''}, pages {hit}: "
                      f"{(done.stderr or done.stdout).strip()[:160]})")

    print("leftovers: reads leave the folder as it was")
    ix = fresh()
    state = folder_state(ix.parent)
    other = work / "other.json"
    other.write_text('{"threshold": 0.8}')
    for argv in (["scan", "--inputs", v1, "--output", work / "r1"], ["index", "check"],
                 ["--config", other, "scan", "--inputs", v1, "--output", work / "r2"],
                 ["--config", other, "index", "--inputs", v2]):
        cli("--index", ix, *argv)
        table.add("leftovers: folder as it was", folder_state(ix.parent) == state, str(argv[:2]))
    table.show()


if __name__ == "__main__":
    main()
