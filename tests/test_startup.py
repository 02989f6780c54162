"""What a command process promises about itself: the console entry's exit codes and output,
no worker pool for a small input, SciPy still usable after numba is loaded, a worker that died
reported as one line, no SQLAlchemy on a scan of a SQLite index, the executor chosen once,
side work one call at a time. (Start-up time is measured by ``bench/startup.py``.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import REPO, SAMPLES, make_package, run_cli

from near_dedup_core import cli, workers

CPT_DAYS = sorted((SAMPLES / "cpt").glob("*/cpt-*"))


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _entry(*argv: object, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "near_dedup_core", *map(str, argv)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def test_console_entry_exit_codes_output_and_a_closed_index(tmp_path):
    idx = tmp_path / "idx" / "cpt.sqlite"
    done = _entry("--quiet", "--index", idx, "index", "--inputs", *CPT_DAYS, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"index {idx}: batch 1 added cpt-v1, cpt-v2, cpt-v3: 218 ")
    # the connection was closed before the exit: no write-ahead log or shared-memory file
    assert sorted(p.name for p in idx.parent.iterdir()) == ["cpt.sqlite"]
    report = tmp_path / "report"
    done = _entry("--quiet", "--index", idx, "scan", "--inputs", *CPT_DAYS, "--output", report,
                  cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(f"report {report}: 218 samples")
    assert _entry("report", "verify", report, cwd=tmp_path).returncode == 0
    again = _entry("--quiet", "--index", idx, "scan", "--inputs", *CPT_DAYS, "--output",
                   report, cwd=tmp_path)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and again.stderr.startswith("near-dedup: error: ")
    assert _entry("--version", cwd=tmp_path).stdout.startswith("near-dedup ")


def test_index_and_scan_of_a_small_input_start_no_worker_pool(tmp_path):
    done = _python(f"""
        import sys
        from near_dedup_core.cli import main
        days = {[str(p) for p in CPT_DAYS]!r}
        assert main(["--quiet", "--index", "i.sqlite", "index", "--inputs", *days]) == 0
        assert main(["--quiet", "--index", "i.sqlite", "scan", "--inputs", *days,
                     "--output", "r"]) == 0
        loaded = [m for m in ("multiprocessing", "concurrent.futures.process")
                  if m in sys.modules]
        print(loaded)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_kernels_compile_and_scipy_stays_usable_after_jit(tmp_path):
    done = _python("""
        import numpy as np
        import near_dedup_core.jit as jit
        from near_dedup_core.jit import numba

        @numba.njit
        def corr(a, b):
            return np.correlate(a, b)

        a, b = np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5])
        assert np.allclose(corr(a, b), np.correlate(a, b))
        jit.warm()
        import scipy.linalg
        assert np.allclose(scipy.linalg.inv(np.eye(2) * 2), np.eye(2) / 2)
        print("ok")
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_worker_that_died_is_one_line(monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    def broken(args):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly while "
                                "the future was running or pending.")

    monkeypatch.setattr(cli, "run", broken)
    code, out, err = run_cli("--quiet", "--index", "unused.sqlite", "index", "--inputs", "x")
    assert code == 1 and out == ""
    assert err == ("near-dedup: error: a worker process died (killed, or out of memory); "
                   "nothing was changed; try fewer --workers\n")

    def other(args):
        raise RuntimeError("something else")

    monkeypatch.setattr(cli, "run", other)
    code, _, err = run_cli("--quiet", "--index", "unused.sqlite", "index", "--inputs", "x")
    assert code == 1 and err.startswith("near-dedup: error: unexpected RuntimeError: something")


@pytest.mark.parametrize("module", ["near_dedup_core.ingest.batch", "near_dedup_core.ingest.work",
                                    "near_dedup_core.ingest.run",
                                    "near_dedup_core.index_store.backends",
                                    "near_dedup_core.index_store.batch",
                                    "near_dedup_core.index_store.check",
                                    "near_dedup_core.index_store.invariants",
                                    "near_dedup_core.index_store.schema",
                                    "near_dedup_core.index_store.sqlite.snapshot",
                                    "near_dedup_core.index_store.sqlite.write",
                                    "near_dedup_core.index_store.texts",
                                    "near_dedup_core.index_store.common",
                                    "near_dedup_core.index_store.records",
                                    "near_dedup_core.index_store.protocols",
                                    "near_dedup_core.index_store.postgres_url",
                                    "near_dedup_core.index_store.postgres"])
def test_any_module_of_index_store_and_ingest_imports_first(tmp_path, module):
    """Whichever module of `index_store` and `ingest` a process imports first, the others
    import after it (no import cycle) and name what they name."""
    done = _python(f"""
        import {module}
        from near_dedup_core.index_store import batch, open_index, postgres, texts
        from near_dedup_core.index_store.sqlite import snapshot
        from near_dedup_core.ingest import batch as ingest_batch, run
        print(run.index_packages.__module__, ingest_batch.BatchWriter.__name__,
              snapshot.IndexSnapshot.__module__, batch.BatchTransaction.__module__,
              texts.KnownTexts.__module__, open_index("postgresql://u:p@h/d").label,
              postgres.PostgresSnapshot.__module__)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["near_dedup_core.ingest.run", "BatchWriter",
                                   "near_dedup_core.index_store.sqlite.snapshot",
                                   "near_dedup_core.index_store.batch",
                                   "near_dedup_core.index_store.texts", "postgresql://u@h/d",
                                   "near_dedup_core.index_store.postgres"]


def test_a_pooled_scan_of_a_sqlite_index_imports_no_sqlalchemy(tmp_path):
    """`scan` of a SQLite index reads it without SQLAlchemy, with its worker pool as well."""
    records = workers.POOL_RECORDS + 60  # over the threshold: scan runs a pool
    pkg = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": f"Record {i % 1000} of the day, long enough to be signed: " * 3}
        for i in range(records)]})
    idx = tmp_path / "index.sqlite"
    assert run_cli("--index", idx, "index", "--inputs", pkg)[0] == 0
    done = _python(f"""
        import sys
        from near_dedup_core import cli
        code = cli.main(["--quiet", "--index", {str(idx)!r}, "scan", "--inputs", {str(pkg)!r},
                         "--output", {str(tmp_path / "report")!r}, "--workers", "2"])
        print(code, "sqlalchemy" in sys.modules, "concurrent.futures.process" in sys.modules)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["0", "False", "True"]
    assert (tmp_path / "report" / "decisions.jsonl").exists()


@pytest.mark.parametrize("name, workers_, in_process, reads_index, shares_memory", [
    ("local", 1, True, True, False), ("local", 4, False, True, True),
    ("ray", 4, False, False, False)])
def test_the_executor_is_chosen_once_with_its_capabilities(name, workers_, in_process,
                                                           reads_index, shares_memory):
    chosen = workers.choose_executor(name, workers_)
    assert (chosen.name, chosen.workers) == (name, workers_)
    assert (chosen.in_process, chosen.workers_read_index, chosen.shares_memory) == \
        (in_process, reads_index, shares_memory)
    assert workers.choose_executor(chosen) is chosen
    small = chosen.for_work(10, workers.POOL_RECORDS)
    assert small.in_process == (name == "local")  # little work: no processes, locally
    assert chosen.for_work(workers.POOL_RECORDS + 1, workers.POOL_RECORDS) is chosen
    with pytest.raises(ValueError, match="unknown executor 'spark'"):
        workers.choose_executor("spark", 2)


def test_a_local_pool_runs_work_in_processes_and_reports_its_parallelism():
    with workers.work_pool("local", 2) as ex:
        assert ex.parallelism == 2
        assert {ex.submit(os.getpid).result() for _ in range(4)} - {os.getpid()}
    with workers.work_pool("local", 1) as ex:
        assert ex.parallelism == 1 and ex.submit(os.getpid).result() == os.getpid()


def test_side_work_runs_one_call_at_a_time_and_a_failure_cancels_the_rest():
    running: list[str] = []
    most = [0]
    lock = threading.Lock()

    def step(name: str) -> str:
        with lock:
            running.append(name)
            most[0] = max(most[0], len(running))
        time.sleep(0.05)
        with lock:
            running.remove(name)
        if name == "bad":
            raise OSError("disk full")
        return name

    with ThreadPoolExecutor(2) as ex:
        done = workers.submit_in_turn(ex, [(step, "a"), (step, "b"), (step, "c")])
        assert [f.result(timeout=30) for f in done] == ["a", "b", "c"]
        failed = workers.submit_in_turn(ex, [(step, "d"), (step, "bad"), (step, "e")])
        assert failed[0].result(timeout=30) == "d"
        with pytest.raises(OSError, match="disk full"):
            failed[1].result(timeout=30)
        assert failed[2].cancelled()
    assert most == [1]


def test_every_module_named_for_the_forkserver_is_a_module_of_the_package():
    """The modules a worker pool's forkserver imports are named by their dotted names, so
    that naming them imports nothing in the command's own process (the server's imports
    overlap the command's, `runtime`); a module renamed or moved without its name here would
    only fail in a pooled run of a large input. Every name resolves to a module."""
    import importlib.util

    from near_dedup_core import runtime
    from near_dedup_core.contamination import probe
    from near_dedup_core.index_store import backends
    from near_dedup_core.ingest import work

    named = {name for profile in runtime.PROFILES.values() for name in profile.pool}
    named |= {*work.WORKER_MODULES, *probe.PRELOAD, *workers._NOT_PRELOADED}
    for backend in (backends.SqliteIndex, backends.PostgresIndex, backends.IcebergIndex):
        named |= set(backend.worker_modules)
    assert {"near_dedup_core.scan.verify", "near_dedup_core.index_store.postgres"} <= named
    missing = sorted(n for n in named
                     if not n.startswith("near_dedup_core.") or importlib.util.find_spec(n) is None)
    assert not missing, missing
