"""Reliability on real text: one snapshot per scan, one-line errors for a damaged index, a full
disk and exhausted memory, no process or file left behind by killed or refused commands.

Commands that must be interrupted at a known point run in a subprocess with
``NEAR_DEDUP_PAUSE=<stage>:<flag>`` (progress.pause_point): the command creates the flag file
and waits until the test removes it.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    REPO,
    drop_every,
    make_package,
    refused,
    reverse_every,
    run_cli,
    stdlib_paragraphs,
    tree_bytes,
)

from near_dedup_core import cli, fsutil, index_store, normalize
from near_dedup_core.fsutil import atomic_dir, sha256_file
from near_dedup_core.ingest import work as ingest_work
from near_dedup_core.scan import candidates as candidates_stage

P = stdlib_paragraphs()
POOL = 2200  # over 2 × ingest.batch.BLOCK_LINES, so that `index --workers 2` starts its pool


def texts(seed: int, n: int, near_every: int = 4) -> list[str]:
    """``n`` texts of two stdlib paragraphs each; every ``near_every``-th one is a near copy
    (one word in 40 reversed, or one in 50 dropped) of an earlier one."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    for i in range(n):
        if out and i % near_every == near_every - 1:
            base = out[int(rng.integers(0, len(out)))]
            out.append(reverse_every(base, 40) if i % 2 else drop_every(base, 50))
        else:
            out.append(" ".join(P[j] for j in rng.choice(len(P), size=2, replace=False)))
    return out


def docs(prefix: str, items: list[str]) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": t, "domain": "docs"} for i, t in enumerate(items)]


@dataclass
class Corpus:
    v1: Path          # POOL records of real text with near duplicates
    v2: Path          # copies of 300 v1 texts (new sample ids) and 500 new texts
    base: Path        # an index holding v1
    v1_texts: list[str]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("reliability")
    t1 = texts(1, POOL)
    v1 = make_package(root / "snapshots", "cpt-v1", {"train": docs("a", t1)},
                      shard_records=1000)
    v2 = make_package(root / "snapshots", "cpt-v2",
                      {"train": docs("b", t1[:300] + texts(2, 500))},
                      created_at="2026-11-26T00:00:00Z")
    base = root / "indexes" / "base.sqlite"
    cli_ok("--index", base, "index", "--inputs", v1, "--workers", 1)
    return Corpus(v1, v2, base, t1)


@pytest.fixture
def index(corpus, tmp_path) -> Path:
    path = tmp_path / "idx" / "cpt.sqlite"
    path.parent.mkdir()
    shutil.copyfile(corpus.base, path)
    return path


def cli_ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


def one_line_error(argv: list, code: int, *fragments: str) -> str:
    return refused(["--quiet", *argv], *fragments, code=code)


def listing(folder: Path) -> dict[str, str]:
    """Every entry of ``folder`` with the digest of the files: the folder 'as it was'."""
    return {p.name: sha256_file(p) if p.is_file() else "dir" for p in sorted(folder.iterdir())}


def env_with(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before pausing: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, "never paused"
        time.sleep(0.05)


# --------------------------------------------------------------------------- one snapshot


@pytest.mark.slow
def test_a_scan_overlapping_an_append_reads_one_snapshot(corpus, index, tmp_path):
    before = tmp_path / "before"
    cli_ok("--index", index, "scan", "--inputs", corpus.v1, "--output", before)
    flag = tmp_path / "paused"
    during = tmp_path / "during"
    proc = subprocess.Popen(
        [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(index), "scan",
         "--inputs", str(corpus.v1), "--output", str(during), "--workers", "2"],
        env=env_with(NEAR_DEDUP_PAUSE=f"scan-verify:{flag}"), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(flag, proc)  # pool and candidates read; verify and the report still to come
        out = cli_ok("--index", index, "index", "--inputs", corpus.v2, "--workers", 1)
        assert "batch 2 added cpt-v2" in out
    finally:
        flag.unlink(missing_ok=True)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert tree_bytes(during) == tree_bytes(before)
    after = tmp_path / "after"
    cli_ok("--index", index, "scan", "--inputs", corpus.v1, "--output", after)
    # the append does change the report: the overlapping scan could have mixed the two states
    assert tree_bytes(after)["relations.jsonl"] != tree_bytes(before)["relations.jsonl"]
    assert b'"package_id":"cpt-v2"' in tree_bytes(after)["relations.jsonl"]


# --------------------------------------------------------------------------- damage


def damage_middle_pages(index: Path) -> None:
    """Overwrite the body of every other page in the middle half of the file with random
    bytes (the header page and the last pages stay intact)."""
    page = 16384
    pages = index.stat().st_size // page
    rng = np.random.default_rng(5)
    with open(index, "r+b") as fh:
        for k in range(pages // 4, 3 * pages // 4, 2):
            fh.seek(k * page + 64)
            fh.write(rng.integers(0, 256, page - 128, dtype=np.uint8).tobytes())


def test_a_damaged_index_is_one_line_for_index_scan_and_check(corpus, index, tmp_path):
    assert index.stat().st_size // 16384 >= 40
    damage_middle_pages(index)
    folder = listing(index.parent)
    hint = "restore it from a backup"
    one_line_error(["--index", index, "index", "--inputs", corpus.v2], 1,
                   f"index {index}: damaged (", hint, "index check")
    one_line_error(["--index", index, "scan", "--inputs", corpus.v1, "--output",
                    tmp_path / "rep"], 1, f"index {index}: damaged (", hint)
    one_line_error(["--index", index, "index", "check"], 1, f"index {index}: damaged (", hint)
    assert listing(index.parent) == folder
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("where", ["range", "list"])
def test_a_missing_content_row_of_the_pool_is_damage(corpus, index, tmp_path, where):
    """The scan reads the pool's content rows by ranges of consecutive row ids, or by id
    lists; either way a row that sources point to and that is gone is named as damage."""
    con = sqlite3.connect(index)
    if where == "list":  # the pool's ids are no longer one run: their slices are id lists
        con.execute("UPDATE sources SET content = content + 100000 WHERE id = 1")
    else:
        con.execute("DELETE FROM contents WHERE id = (SELECT MAX(content) / 2 FROM sources)")
    con.commit()
    con.close()
    one_line_error(["--index", index, "scan", "--inputs", corpus.v1, "--output",
                    tmp_path / "rep"], 1, f"index {index}: damaged (1 content rows are missing)")
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_damaged_pages_never_give_a_traceback(corpus, index, tmp_path, seed):
    """A few garbage pages anywhere in the middle: SQLite may notice them (malformed) or read
    garbage values without noticing; either way the scan says the index is damaged (or, if it
    never read those pages, succeeds) and `index check` finds the damage."""
    rng = np.random.default_rng(seed)
    page = 16384
    pages = index.stat().st_size // page
    with open(index, "r+b") as fh:
        for k in rng.choice(np.arange(pages // 4, 3 * pages // 4), int(rng.integers(1, 9)),
                            replace=False).tolist():
            fh.seek(k * page + 64)
            fh.write(rng.integers(0, 256, page - 128, dtype=np.uint8).tobytes())
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", corpus.v1,
                           "--output", tmp_path / "rep")
    if code != 0:
        assert code == 1 and err.count("\n") == 1 and f"index {index}: damaged (" in err, err
    one_line_error(["--index", index, "index", "check"], 1, f"index {index}: damaged (")


def test_index_check_passes_a_sound_index_and_changes_nothing(corpus, index):
    folder = listing(index.parent)
    out = cli_ok("--index", index, "index", "check")
    assert out.startswith(f"index {index}: OK (1 batch, 1 package, ")
    assert out.endswith(f" distinct texts, {POOL:,} records)\n")
    assert listing(index.parent) == folder


@pytest.mark.parametrize("sql, fragment", [
    ("DELETE FROM contents WHERE id = (SELECT MAX(content) FROM bands)",
     "a band row names a missing content"),
    ("UPDATE sources SET package = 99 WHERE id = 5", "a source names a missing package"),
    ("UPDATE contents SET batch = 7 WHERE id = 3", "a content names a batch after the last one"),
    ("UPDATE contents SET text_z = x'00112233' WHERE id = 9",
     "the text of content row 9 does not decompress"),
    ("DELETE FROM meta WHERE key = 'config'", "meta lacks config"),
], ids=["band", "source", "batch", "text", "meta"])
def test_index_check_names_the_first_broken_invariant(index, sql, fragment):
    con = sqlite3.connect(index)
    con.execute(sql)
    con.commit()
    con.close()
    folder = listing(index.parent)
    one_line_error(["--index", index, "index", "check"], 1, f"index {index}: ", fragment)
    assert listing(index.parent) == folder


def test_index_check_usage(index, corpus):
    one_line_error(["--index", index, "index", "check", "--inputs", corpus.v1], 1,
                   "unrecognized arguments: --inputs")
    one_line_error(["--index", index, "index"], 1, "index needs --inputs")


# --------------------------------------------------------------------------- exhaustion


def run_with_file_size_limit(limit: int, *argv: object) -> subprocess.CompletedProcess:
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet",
                           *map(str, argv)], env=env_with(), preexec_fn=limited,
                          capture_output=True, text=True, timeout=300, check=False)


def assert_one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("near-dedup: error: "), \
        done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, (fragment, done.stderr)


def test_a_full_disk_during_a_later_batch_leaves_the_index_unchanged(corpus, index):
    folder = listing(index.parent)
    done = run_with_file_size_limit(256 * 1024, "--index", index, "index", "--inputs",
                                    corpus.v2, "--workers", 2)
    assert_one_line(done, f"index {index}: cannot write (", "file-size limit",
                    "nothing was changed")
    assert listing(index.parent) == folder


def test_a_full_disk_during_a_first_batch_leaves_no_index(corpus, tmp_path):
    index = tmp_path / "new" / "cpt.sqlite"
    index.parent.mkdir()
    done = run_with_file_size_limit(256 * 1024, "--index", index, "index", "--inputs",
                                    corpus.v1, "--workers", 1)
    assert_one_line(done, f"index {index}: cannot write (", "nothing was changed")
    assert list(index.parent.iterdir()) == []


def test_a_full_disk_while_writing_a_report_publishes_nothing(corpus, index, tmp_path):
    out = tmp_path / "reports" / "rep"
    out.parent.mkdir()
    folder = listing(index.parent)
    done = run_with_file_size_limit(64 * 1024, "--index", index, "scan", "--inputs", corpus.v1,
                                    "--output", out, "--workers", 1)
    assert_one_line(done, f"output {out}: cannot write (", "nothing was written")
    assert list(out.parent.iterdir()) == []
    assert listing(index.parent) == folder


def test_memory_exhaustion_during_scan_is_one_line(corpus, index, tmp_path, monkeypatch):
    def huge(*args, **kwargs):  # numpy's own allocation error (_ArrayMemoryError)
        return np.empty((1 << 24, 1 << 24), dtype=np.uint64)  # 2 PiB

    monkeypatch.setattr(candidates_stage, "band_keys_into", huge)
    folder = listing(index.parent)
    err = one_line_error(["--index", index, "scan", "--inputs", corpus.v1, "--output",
                          tmp_path / "rep"], 1, "out of memory (Unable to allocate",
                         "nothing was changed")
    assert "Traceback" not in err
    assert listing(index.parent) == folder
    assert not (tmp_path / "rep").exists()


def test_memory_exhaustion_during_index_is_one_line(corpus, index, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(normalize, "normalize_spans", no_memory)  # as work calls it
    folder = listing(index.parent)
    one_line_error(["--index", index, "index", "--inputs", corpus.v2, "--workers", 1], 1,
                   "out of memory; nothing was changed")
    assert listing(index.parent) == folder


def test_an_extension_failing_without_an_error_under_memory_pressure_is_one_line(
        corpus, index, monkeypatch):
    # measured under RLIMIT_AS: a signing worker's C code can fail an allocation without
    # setting an error, which reaches the command as SystemError
    def silent_failure(*args, **kwargs):
        raise SystemError("error return without exception set")

    monkeypatch.setattr(ingest_work, "sign", silent_failure)
    folder = listing(index.parent)
    one_line_error(["--index", index, "index", "--inputs", corpus.v2, "--workers", 1], 1,
                   "as happens when memory runs out; nothing was changed")
    assert listing(index.parent) == folder


def test_any_unexpected_error_is_one_line_and_changes_nothing(corpus, index, monkeypatch):
    def unexpected(*args, **kwargs):
        raise ImportError("cmath.so: failed to map segment from shared object")

    monkeypatch.setattr(ingest_work, "sign", unexpected)
    before = listing(index.parent)
    one_line_error(["--index", index, "index", "--inputs", corpus.v2, "--workers", 1], 1,
                   "unexpected ImportError: cmath.so: failed to map segment",
                   "NEAR_DEDUP_TRACEBACK=1")
    assert listing(index.parent) == before
    monkeypatch.setenv("NEAR_DEDUP_TRACEBACK", "1")
    with pytest.raises(ImportError):
        run_cli("--quiet", "--index", index, "index", "--inputs", corpus.v2, "--workers", 1)
    assert listing(index.parent) == before


# --------------------------------------------------------------------------- killed runs


def session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


_SMALL_VERIFY_CHUNKS = """
import sys
from near_dedup_core import cli
from near_dedup_core.scan import verify
verify.VERIFY_CHUNK = 10  # many verify chunks, so that the worker pool runs
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("command, sig", [("index", signal.SIGKILL), ("scan", signal.SIGKILL),
                                          ("index", signal.SIGTERM),
                                          ("contamination", signal.SIGKILL)],
                         ids=["index-SIGKILL", "scan-SIGKILL", "index-SIGTERM",
                              "contamination-SIGKILL"])
def test_no_process_survives_a_killed_run(corpus, index, tmp_path, command, sig):
    flag = tmp_path / "paused"
    if command == "index":
        new = tmp_path / "new" / "cpt.sqlite"
        argv = ["-m", "near_dedup_core", "--quiet", "--index", str(new), "index", "--inputs",
                str(corpus.v1), "--workers", "2"]
        stage = "index-write"
    elif command == "scan":
        argv = ["-c", _SMALL_VERIFY_CHUNKS, "--quiet", "--index", str(index), "scan",
                "--inputs", str(corpus.v1), "--output", str(tmp_path / "rep"), "--workers", "2"]
        stage = "scan-verify-pool"
    else:
        evals = make_package(tmp_path, "evals", {"test": docs("e", corpus.v1_texts[:20])})
        argv = ["-m", "near_dedup_core", "--quiet", "contamination", "--evals", str(evals),
                "--inputs", str(corpus.v1), "--output", str(tmp_path / "rep"),
                "--workers", "2"]
        stage = "contamination-pool"
    proc = subprocess.Popen([sys.executable, *argv], env=env_with(
        NEAR_DEDUP_PAUSE=f"{stage}:{flag}"), stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        wait_for(flag, proc)
        running = session_processes(proc.pid)
        # the command, the resource tracker, the forkserver and two workers
        assert len(running) >= 4, running
        os.kill(proc.pid, sig)  # the command only: the others must follow by themselves
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while session_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_processes(proc.pid) == []
    finally:
        for pid in session_processes(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    if sig == signal.SIGTERM:
        assert proc.returncode == 143
    if command == "index":
        assert not new.exists()
        if sig == signal.SIGTERM:  # unwound: the temporary file and the new folder are gone
            assert not new.parent.exists()
    else:
        assert not (tmp_path / "rep").exists()


def stop_session(proc: subprocess.Popen) -> None:
    for pid in session_processes(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def session_empties(proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while session_processes(proc.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def large_append(corpus, tmp_path_factory) -> tuple[Path, Path]:
    """An index of v1 and a second version of many records (near copies and new texts):
    an append that keeps two workers busy for seconds."""
    root = tmp_path_factory.mktemp("large-append")
    more = texts(3, 5000)
    v3 = make_package(root, "cpt-v3", {"train": docs("c", corpus.v1_texts + more)},
                      shard_records=2000, created_at="2026-11-27T00:00:00Z")
    return corpus.base, v3


#: SIGTERM tries during a large append (more, on a larger corpus, are a run by hand).
TERM_TRIES = 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_during_a_large_append_exits_within_seconds(large_append, tmp_path):
    base, package = large_append
    for attempt in range(TERM_TRIES):
        index = tmp_path / f"idx{attempt}" / "cpt.sqlite"
        index.parent.mkdir()
        shutil.copyfile(base, index)
        before = listing(index.parent)
        proc = subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                                 str(index), "index", "--inputs", str(package), "--workers",
                                 "2"], env=env_with(), stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while len(session_processes(proc.pid)) < 3 and proc.poll() is None:  # pool started
                assert time.monotonic() < deadline, "the pool never started"
                time.sleep(0.02)
            time.sleep(0.4 * attempt)  # from the pool's start to the middle of the batch
            os.kill(proc.pid, signal.SIGTERM)
            started = time.monotonic()
            proc.wait(timeout=10)
            took = time.monotonic() - started
            assert took < 10
            assert session_empties(proc, 5), session_processes(proc.pid)
        finally:
            stop_session(proc)
            err = proc.stderr.read()
            proc.stderr.close()
        if proc.returncode == 0:  # finished before the signal: the batch is complete
            assert "Traceback" not in err, err
            continue
        assert proc.returncode == 143, (proc.returncode, err)
        assert err == "near-dedup: terminated\n", err
        after = listing(index.parent)
        if took >= cli.TERM_GRACE:  # a loaded machine: the deadline ended the unwinding, and
            # SQLite's own recovery undoes the batch (its -wal and -shm may still be there)
            assert after["cpt.sqlite"] == before["cpt.sqlite"], after
            cli_ok("--index", index, "index", "check")
            continue
        if after != before:  # the signal came after the batch's commit, as the line was printed
            assert list(after) == ["cpt.sqlite"], after  # no -wal, -shm or lock file
            cli_ok("--index", index, "index", "check")
            assert "nothing to do, already indexed" in cli_ok(
                "--index", index, "index", "--inputs", package)
        # otherwise rolled back: the folder as it was, no -wal, -shm or lock file


class Interrupted(BaseException):
    """What the CLI's SIGTERM handler raises (`cli.Terminated`), or Ctrl-C: no Exception."""


def test_an_interrupted_statement_of_a_batch_leaves_the_folder_as_it_was(index):
    """A SIGTERM that lands inside one of the batch's statements: SQLAlchemy takes such an
    exception for a lost connection and would drop the connection without closing the
    statement's cursor, which the exception's traceback keeps (in a reference cycle) — a
    closed SQLite connection with a live statement stays open, and the -wal and -shm with it,
    until that cursor is freed, which a terminated command (``os._exit``) never does. While
    the exception is still in flight, the batch is rolled back and its connections closed."""
    import gc

    from sqlalchemy import Engine, event

    from near_dedup_core.config import NearDedupConfig

    before = listing(index.parent)

    def interrupt(_conn, _cursor, statement, *_args) -> None:
        if statement.startswith("SELECT max(batches.seq)"):  # a query: its statement is open
            raise Interrupted

    event.listen(Engine, "after_cursor_execute", interrupt)
    gc.disable()  # a terminated command leaves before any collection
    try:
        with index_store.open_index(index).batch(NearDedupConfig(), "2026-12-01T00:00:00Z") \
                as store:
            store.add_batch("2026-12-01T00:00:00Z", "test", ["cpt-x"])
        raise AssertionError("not interrupted")
    except Interrupted:
        assert listing(index.parent) == before  # no -wal/-shm, the index unchanged
    finally:
        gc.enable()
        event.remove(Engine, "after_cursor_execute", interrupt)


def test_a_sigterm_once_the_command_is_done_exits_with_its_code(index):
    """A SIGTERM that lands after the command finished, while the interpreter exits (here
    from an exit hook), ends the process with the command's exit code instead of killing it:
    its work is complete, and a scheduler must not read it as stopped."""
    program = ("import atexit, os, signal, sys\n"
               "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
               "from near_dedup_core.cli import console_main\n"
               f"sys.argv = ['near-dedup', '--quiet', '--index', {str(index)!r}, 'index', "
               "'check']\n"
               "console_main()\n")
    done = subprocess.run([sys.executable, "-c", program], env=env_with(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() and not done.stderr, (done.stdout, done.stderr)


def test_an_interruption_while_the_writer_lock_is_taken_releases_it(index, monkeypatch):
    from near_dedup_core.index_store.sqlite import write as sqlite_write

    before = listing(index.parent)
    is_current = sqlite_write._is_current
    calls = []

    def interrupted_once(fd, path):
        calls.append(path)
        if len(calls) == 1:  # locked, not yet checked: SIGTERM lands here
            raise Interrupted
        return is_current(fd, path)

    monkeypatch.setattr(sqlite_write, "_is_current", interrupted_once)
    with pytest.raises(Interrupted), sqlite_write.writer_lock(index):
        raise AssertionError("not interrupted")
    assert listing(index.parent) == before  # no lock file left
    with sqlite_write.writer_lock(index, timeout=0):  # and nobody holds it
        pass


def test_an_interruption_while_the_background_check_starts_closes_its_reader(index,
                                                                            monkeypatch):
    import threading

    from near_dedup_core.index_store.invariants import sqlite_background_check
    from near_dedup_core.index_store.sqlite.snapshot import connect_reader

    before = listing(index.parent)

    def interrupted(_thread):
        raise Interrupted

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(Interrupted):
        sqlite_background_check(index, connect_reader)
    assert listing(index.parent) == before  # the reader is closed: no -wal, no -shm


_HELD_BY_THE_TRACEBACK = """
import os, signal, sys, time
from pathlib import Path
from near_dedup_core import cli
from near_dedup_core.index_store.sqlite.snapshot import connect_reader

def command(args):
    con = connect_reader(Path(os.environ["INDEX"]))
    con.execute("SELECT COUNT(*) FROM meta").fetchall()  # its -wal and -shm exist
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    except BaseException as exc:
        handled = exc  # a frame that holds the exception it handles: a reference cycle
        raise

if __name__ == "__main__":
    cli.run = command
    sys.argv = ["near-dedup", "--quiet", "report", "verify", "unused"]
    cli.console_main()
"""


def test_a_terminated_command_closes_what_its_traceback_holds(index, tmp_path):
    """A connection that only the exception's traceback still references (in a cycle) is
    closed before the command leaves through ``os._exit``: no -wal, no -shm."""
    before = listing(index.parent)
    script = tmp_path / "held.py"
    script.write_text(_HELD_BY_THE_TRACEBACK)
    proc = subprocess.run([sys.executable, str(script)], env=env_with(INDEX=str(index)),
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (143, "near-dedup: terminated\n")
    assert listing(index.parent) == before


_LOGGED_BY_A_LIBRARY = """
import logging, os, signal, sys, time
from near_dedup_core import cli

def command(args):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    except BaseException:  # as SQLAlchemy's pool does when the signal lands in a close
        logging.getLogger("sqlalchemy.pool.impl.NullPool").error("Exception closing connection",
                                                                 exc_info=True)
        raise

if __name__ == "__main__":
    cli.run = command
    sys.argv = ["near-dedup", "--quiet", "report", "verify", "unused"]
    cli.console_main()
"""


def test_a_library_logging_the_signal_does_not_add_a_traceback(tmp_path):
    """A library that logs the SIGTERM it meets before re-raising it (SQLAlchemy's pool, closing
    a connection) adds nothing to the command's one line; its other records still show."""
    script = tmp_path / "logged.py"
    script.write_text(_LOGGED_BY_A_LIBRARY)
    proc = subprocess.run([sys.executable, str(script)], env=env_with(), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (143, "near-dedup: terminated\n")
    other = tmp_path / "other.py"
    other.write_text(_LOGGED_BY_A_LIBRARY.replace("exc_info=True", "exc_info=False"))
    proc = subprocess.run([sys.executable, str(other)], env=env_with(), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        143, "Exception closing connection\nnear-dedup: terminated\n")


_IN_A_WEAKREF_CALLBACK = """
import os, signal, sys, time, weakref
from near_dedup_core import cli

class Held:
    pass

def callback(_ref):  # run by a collection; a SIGTERM here cannot propagate
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)

def command(args):
    held = Held()
    ref = weakref.ref(held, callback)
    del held
    time.sleep(3)  # a command that goes on after the lost signal
    print("finished")

if __name__ == "__main__":
    cli.run = command
    sys.argv = ["near-dedup", "--quiet", "report", "verify", "unused"]
    cli.console_main()
"""


def test_a_sigterm_in_a_weakref_callback_is_not_printed_and_still_ends_the_command(tmp_path):
    """A SIGTERM that lands in a weakref callback (as SQLAlchemy's, during a collection) cannot
    propagate: no "Exception ignored" traceback is printed, and the deadline its delivery
    started ends the command with exit 143 and the one line."""
    script = tmp_path / "weakref_callback.py"
    script.write_text(_IN_A_WEAKREF_CALLBACK.replace("time.sleep(3)", "time.sleep(30)"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], env=env_with(), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (143, "", "near-dedup: terminated\n")
    assert time.monotonic() - started < 20


_LARGE_RESULTS = """
import os, signal, sys, threading
from near_dedup_core import cli, workers

def large(n):
    return b"x" * n

def command(args):
    with workers.process_pool(2) as ex:
        while True:  # results of 64 MiB: a worker is nearly always writing one
            for fut in [ex.submit(large, 64 << 20) for _ in range(4)]:
                fut.result()

if __name__ == "__main__":
    cli.run = command
    sys.argv = ["near-dedup", "--quiet", "report", "verify", "unused"]
    threading.Timer(float(os.environ["DELAY"]), os.kill,
                    (os.getpid(), signal.SIGTERM)).start()
    cli.console_main()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("delay", [1.0, 1.3])
def test_sigterm_while_a_worker_writes_a_result_exits_at_once(tmp_path, delay):
    """Killed mid-write, a worker leaves a half-written result in the pool's pipe, which the
    pool's result thread then waits on forever (the command holds the pipe's other end): the
    terminated command must not join that thread."""
    script = tmp_path / "large_results.py"
    script.write_text(_LARGE_RESULTS)
    proc = subprocess.Popen([sys.executable, str(script)], env=env_with(DELAY=str(delay)),
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        proc.wait(timeout=delay + 10)
        assert session_empties(proc, 5), session_processes(proc.pid)
    finally:
        stop_session(proc)
        err = proc.stderr.read()
        proc.stderr.close()
    assert (proc.returncode, err) == (143, "near-dedup: terminated\n")


_IN_A_CLASS_DEFINITION = """
import os, signal, sys
from near_dedup_core import cli

class Named:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10 ** 7):  # the handler runs here
            pass

def command(args):
    class Defined:  # as an import defines its classes
        field = Named()

if __name__ == "__main__":
    cli.run = command
    sys.argv = ["near-dedup", "--quiet", "report", "verify", "unused"]
    cli.console_main()
"""


def test_sigterm_during_a_class_definition_is_a_termination(tmp_path):
    """Python reports an exception raised in ``__set_name__`` (while a module being imported
    defines its classes) as a RuntimeError caused by it: still "terminated", exit 143."""
    script = tmp_path / "class_definition.py"
    script.write_text(_IN_A_CLASS_DEFINITION)
    proc = subprocess.run([sys.executable, str(script)], env=env_with(), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (143, "near-dedup: terminated\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("at", [0.05, 0.3, 0.65, 1.2])
def test_sigkill_at_any_moment_leaves_no_process_and_no_warning(corpus, index, tmp_path, at):
    """Killed while the pool's server starts, while it imports, or while the workers run:
    every process of the command is gone soon after, and none prints anything."""
    proc = subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                             str(index), "scan", "--inputs", str(corpus.v1), "--output",
                             str(tmp_path / "rep"), "--workers", "2"], env=env_with(),
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(at)
        if proc.poll() is None:  # (not reaped yet, the pid is still the command's)
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert session_empties(proc, 3), session_processes(proc.pid)
    finally:
        stop_session(proc)
        err = proc.stderr.read()  # every writer of the pipe is gone: this is all of it
        proc.stderr.close()
    assert err == "", err
    if proc.returncode == 0 or (tmp_path / "rep").exists():
        # on a fast machine the scan can publish first (the kill then lands as it exits):
        # its report is whole
        assert cli_ok("report", "verify", tmp_path / "rep").startswith("report ")
    assert proc.returncode in (0, -signal.SIGKILL)


def run_with_address_space(limit_mib: int, *argv: object) -> subprocess.CompletedProcess:
    def cap() -> None:
        limit = limit_mib << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet",
                           *map(str, argv)], preexec_fn=cap, env=env_with(),
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("limit_mib", [250, 300, 350])
def test_index_under_an_address_space_cap_is_one_line(corpus, large_append, index, tmp_path,
                                                      limit_mib):
    """Whatever fails first under the cap (the pool's server importing its modules, a
    worker attaching the shared blocks, the command itself): one line, nothing changed."""
    before = listing(index.parent)
    for target in (index, tmp_path / "new" / "cpt.sqlite"):
        inputs = [large_append[1]] if target == index else [corpus.v1]
        done = run_with_address_space(limit_mib, "--index", target, "index", "--inputs",
                                      *inputs, "--workers", 2)
        assert done.returncode in (1, 2), (done.returncode, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("near-dedup: error: "), done.stderr
    assert listing(index.parent) == before
    assert not (tmp_path / "new").exists()


def read_only_run(read_only: list[Path], argv: list, env: dict[str, str]
                  ) -> subprocess.CompletedProcess:
    """``python argv`` with the folders of ``read_only`` mounted read-only (a private mount
    namespace, as root)."""
    mounts = " && ".join(f"mount --bind -o ro '{p}' '{p}'" for p in read_only)
    return subprocess.run(["unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                           sys.executable, *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="mounts read-only folders in a namespace of its own (root)")
@pytest.mark.parametrize("cache_setting", ["home", "numba-cache-dir"])
def test_index_and_scan_work_where_no_numba_cache_can_be_written(corpus, tmp_path, request,
                                                                 cache_setting):
    """The package's own ``__pycache__`` folders, the home folder and (for the second case)
    a configured ``NUMBA_CACHE_DIR`` are read-only: the kernels are cached in a private
    folder of the user's in the temporary directory instead, never "cannot cache". (The
    second case runs `index` alone: every kernel goes through the one cache locator,
    `near_dedup_core.jit`, and the first case's scan compiles the rest.)"""
    home = tmp_path / "home"
    home.mkdir()
    # a short temporary folder: the pool's forkserver puts its socket there, and a socket's
    # path may not exceed 107 bytes (a parallel run's tmp_path is longer)
    temp = Path(tempfile.mkdtemp(prefix="nd-"))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    env = {k: v for k, v in env_with().items() if k not in ("XDG_CACHE_HOME", "NUMBA_CACHE_DIR")}
    env.update(HOME=str(home), TMPDIR=str(temp))
    read_only = [REPO / "near_dedup_core", home]
    if cache_setting == "numba-cache-dir":
        configured = tmp_path / "numba-cache"
        configured.mkdir()
        env["NUMBA_CACHE_DIR"] = str(configured)
        read_only.append(configured)
    index = tmp_path / "idx" / "cpt.sqlite"
    commands = [["index", "--inputs", corpus.v1, "--workers", 2]]
    if cache_setting == "home":
        commands.append(["scan", "--inputs", corpus.v1, "--output", tmp_path / "rep",
                         "--workers", 2])
    for argv in commands:
        done = read_only_run(read_only, ["-m", "near_dedup_core", "--quiet", "--index", index,
                                         *argv], env)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "rep" / "manifest.json").is_file() == (cache_setting == "home")
    cache = temp / f"near-dedup-numba-{os.getuid()}"
    assert any(cache.rglob("*.nbi")), "the kernels were cached in the user's private folder"


# --------------------------------------------------------------------------- leftovers


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporaries_of_dead_processes_are_removed(corpus, index, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    stale = reports / f".rep.tmp-{dead_pid()}"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "decisions.jsonl").write_text("partial\n")
    live = reports / f".rep.tmp-{os.getppid()}"  # a process that is still running
    live.mkdir()
    other = reports / f".other.tmp-{dead_pid()}"  # another output's: not ours to judge
    other.mkdir()
    cli_ok("--index", index, "scan", "--inputs", corpus.v1, "--output", reports / "rep")
    assert sorted(p.name for p in reports.iterdir()) == sorted(["rep", live.name, other.name])


def test_atomic_dir_removes_stale_temporaries_before_its_own(tmp_path):
    target = tmp_path / "mix"
    stale = tmp_path / f".mix.tmp-{dead_pid()}"
    stale.mkdir()
    with atomic_dir(target) as tmp:
        assert not stale.exists()
        (tmp / "x").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix"]
    assert fsutil.remove_stale_temporaries(target) == []


def test_reads_leave_the_index_folder_as_it_was(corpus, index, tmp_path):
    folder = listing(index.parent)
    cli_ok("--index", index, "scan", "--inputs", corpus.v1, "--output", tmp_path / "ok")
    assert listing(index.parent) == folder
    other = tmp_path / "other.json"
    other.write_text('{"threshold": 0.8}')
    one_line_error(["--index", index, "--config", other, "scan", "--inputs", corpus.v1,
                    "--output", tmp_path / "refused"], 1, "bound to a different config")
    one_line_error(["--index", index, "--config", other, "index", "--inputs", corpus.v2], 1,
                   "bound to a different config")
    cli_ok("--index", index, "index", "check")
    assert listing(index.parent) == folder


def test_a_refused_first_batch_removes_the_folders_it_created(corpus, tmp_path):
    bad = make_package(tmp_path, "cpt-bad", {"train": docs("x", P[:3]) + [b"{not json"]})
    index = tmp_path / "a" / "b" / "cpt.sqlite"
    one_line_error(["--index", index, "index", "--inputs", bad], 1, "cpt-bad")
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "kept"
    existing.mkdir()
    one_line_error(["--index", existing / "cpt.sqlite", "index", "--inputs", bad], 1, "cpt-bad")
    assert existing.is_dir() and list(existing.iterdir()) == []


def test_an_index_in_a_folder_sqlite_cannot_write_is_read_immutable(corpus, index, tmp_path,
                                                                    monkeypatch):
    # running as root, chmod cannot take write access away: the check itself is replaced
    monkeypatch.setattr(index_store.sqlite.snapshot, "_dir_writable", lambda folder: False)
    folder = listing(index.parent)
    cli_ok("--index", index, "scan", "--inputs", corpus.v1, "--output", tmp_path / "rep")
    cli_ok("--index", index, "index", "check")
    assert listing(index.parent) == folder  # immutable reads create no -wal/-shm


def test_an_index_sqlite_cannot_open_is_one_line_naming_the_cause(corpus, index, tmp_path,
                                                                  monkeypatch):
    def cannot_open(path):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(index_store.sqlite.snapshot, "connect_reader", cannot_open)
    one_line_error(["--index", index, "scan", "--inputs", corpus.v1, "--output",
                    tmp_path / "rep"], 1, f"index {index}: cannot be opened or written "
                   "(unable to open database file)", "-wal/-shm")


_STOPPED_WHILE_A_WORKER_STARTS = """
import os, sqlite3, sys, time
import multiprocessing.popen_forkserver as popen_forkserver
from near_dedup_core import workers

kept = []

def read(db):
    if not kept:  # a worker keeps its read connection for its life, as an index's workers do
        kept.append(sqlite3.connect(db))
    kept[0].execute("SELECT COUNT(*) FROM t").fetchone()
    time.sleep(1)

if __name__ == "__main__":
    db = sys.argv[1]
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    launch = popen_forkserver.Popen._launch
    started = []

    def stopped_while_the_second_starts(self, process_obj):
        launch(self, process_obj)  # the worker is forked and runs
        started.append(self.pid)
        if len(started) == 2:  # a busy machine: the pool has not yet recorded the worker
            time.sleep(0.5)
            raise KeyboardInterrupt

    popen_forkserver.Popen._launch = stopped_while_the_second_starts
    try:
        with workers.process_pool(2) as ex:
            for fut in [ex.submit(read, db) for _ in range(6)]:
                fut.result()
    except KeyboardInterrupt:
        print("stopped while worker", started[-1], "started")
    con.close()  # the last connection: SQLite removes the -wal and -shm
"""


def test_a_stop_while_a_worker_starts_leaves_no_worker_reading(tmp_path):
    """A stop (SIGTERM, Ctrl-C) that lands while the pool starts a worker, after the fork but
    before the pool has recorded it, cannot kill that worker: it must not have been given a
    task by then. Here the tasks keep a read connection to a SQLite file, as an index's
    workers do: a worker still reading when the command closes its own connection keeps the
    -wal and -shm files after the command (it dies with it, without closing)."""
    script = tmp_path / "stopped_while_a_worker_starts.py"
    script.write_text(_STOPPED_WHILE_A_WORKER_STARTS)
    folder = tmp_path / "db"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(folder / "t.sqlite")],
                            env=env_with(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
        assert session_empties(proc, 5), session_processes(proc.pid)
    finally:
        stop_session(proc)
    assert (proc.returncode, err) == (0, ""), err
    assert out.startswith("stopped while worker"), out
    assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite"]
