"""What a command process loads and how it ends: the console entry, numba without SciPy's
BLAS bindings (`near_dedup_core.jit`), no worker pool for a small input, a worker that died
reported as one line; how often the garbage collector runs, and side work one call at a
time."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import REPO, SAMPLES, make_package, run_cli

from near_dedup_core import cli, collector, workers

# Each test starts fresh interpreters (imports, numba's CPU target, worker pools).
pytestmark = pytest.mark.slow

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


def test_index_and_scan_of_a_small_input_load_neither_scipy_linalg_nor_a_worker_pool(tmp_path):
    done = _python(f"""
        import sys
        from near_dedup_core.cli import main
        days = {[str(p) for p in CPT_DAYS]!r}
        assert main(["--quiet", "--index", "i.sqlite", "index", "--inputs", *days]) == 0
        assert main(["--quiet", "--index", "i.sqlite", "scan", "--inputs", *days,
                     "--output", "r"]) == 0
        loaded = [m for m in ("scipy.linalg", "multiprocessing", "concurrent.futures.process")
                  if m in sys.modules]
        assert "numba.np.arraymath" in sys.modules
        assert "scipy.linalg.cython_blas" not in sys.modules  # hidden, then unhidden
        import scipy.linalg.cython_blas  # still importable afterwards
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


def test_the_forkserver_preloads_the_package_modules_of_the_command(tmp_path):
    done = _python("""
        import near_dedup_core.jit
        from near_dedup_core.ingest.run import index_packages
        from near_dedup_core import workers
        print(" ".join(workers._preload()))
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    preload = done.stdout.split()
    # the guard first; the warm-up last, once the modules that say what to warm are loaded
    assert preload[0] == "near_dedup_core._pool_guard"
    assert preload[-1] == "near_dedup_core._pool_warm"
    assert {"near_dedup_core.ingest", "near_dedup_core.ingest.run", "near_dedup_core.ingest.work",
            "near_dedup_core.workers", "near_dedup_core.index_store"} <= set(preload)
    assert "near_dedup_core.__main__" not in preload and len(set(preload)) == len(preload)
    done = _python("""
        from near_dedup_core import workers
        print(" ".join(workers._preload()))
        """, tmp_path)
    assert done.stdout.split() == ["near_dedup_core._pool_guard", "near_dedup_core.collector",
                                   "near_dedup_core.workers"]
    # `index_packages` asks for its workers' modules: the kernels' with their warm-up, last,
    # although its own process has not loaded them
    done = _python("""
        import sys
        from near_dedup_core.ingest import run, work
        from near_dedup_core import workers
        print("numba" in sys.modules, " ".join(workers._preload(work.WORKER_MODULES)))
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    numba, *preload = done.stdout.split()
    assert numba == "False" and preload[-1] == "near_dedup_core._pool_warm"
    assert {"near_dedup_core.ingest.run", "near_dedup_core.ingest.work",
            "near_dedup_core.normalize", "near_dedup_core.signature"} <= set(preload)
    assert len(set(preload)) == len(preload)


@pytest.mark.parametrize("module", ["near_dedup_core.ingest.batch", "near_dedup_core.ingest.work",
                                    "near_dedup_core.ingest.run",
                                    "near_dedup_core.index_store.backends",
                                    "near_dedup_core.index_store.batch",
                                    "near_dedup_core.index_store.check",
                                    "near_dedup_core.index_store.invariants",
                                    "near_dedup_core.index_store.schema",
                                    "near_dedup_core.index_store.snapshot",
                                    "near_dedup_core.index_store.sqlite_write",
                                    "near_dedup_core.index_store.texts",
                                    "near_dedup_core.index_store.postgres"])
def test_any_module_of_index_store_and_ingest_imports_first(tmp_path, module):
    """Whichever module of `index_store` and `ingest` a process imports first, the others
    import after it (no import cycle) and name what they name."""
    done = _python(f"""
        import {module}
        from near_dedup_core.index_store import batch, open_index, postgres, snapshot, texts
        from near_dedup_core.ingest import batch as ingest_batch, run
        print(run.index_packages.__module__, ingest_batch.BatchWriter.__name__,
              snapshot.IndexSnapshot.__module__, batch.BatchTransaction.__module__,
              texts.KnownTexts.__module__, open_index("postgresql://u:p@h/d").label,
              postgres.PostgresSnapshot.__module__)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["near_dedup_core.ingest.run", "BatchWriter",
                                   "near_dedup_core.index_store.snapshot",
                                   "near_dedup_core.index_store.batch",
                                   "near_dedup_core.index_store.texts", "postgresql://u@h/d",
                                   "near_dedup_core.index_store.postgres"]


def test_the_index_workers_import_neither_sqlalchemy_nor_pydantic(tmp_path):
    """`index` starts its pool's forkserver with its workers' modules alone
    (`ingest.work.WORKER_MODULES`, `cli._pool_modules`): the command indexes its blocks
    through that server, and a worker forked from it holds the workers' modules and neither
    SQLAlchemy, pydantic, the config's models nor the index's store (about 0.5 s of CPU the
    server no longer spends before the first worker can start). The command's own process,
    which runs no block, has not loaded numba."""
    records = workers.POOL_RECORDS + 60  # over the threshold: the server is started early
    pkg = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": f"Record {i} of the day, long enough to be signed: " * 3}
        for i in range(records)]})
    idx = tmp_path / "index.sqlite"
    done = _python(f"""
        from near_dedup_core import cli, workers
        code = cli.main(["--quiet", "--index", {str(idx)!r}, "index", "--inputs", {str(pkg)!r},
                         "--workers", "2"])
        heavy = ("sqlalchemy", "pydantic", "pydantic_core", "near_dedup_core.config",
                 "near_dedup_core.index_store.batch", "near_dedup_core.ingest.run")
        with workers.process_pool(2) as ex:
            loaded = ex.submit(eval, "sorted(__import__('sys').modules)").result()
        import sys
        print(code, "numba" in sys.modules, "near_dedup_core.normalize" in loaded,
              sorted({{m for m in loaded if m.split(".")[0] in heavy or m in heavy}}))
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split(maxsplit=3) == ["0", "False", "True", "[]"]
    with sqlite3.connect(idx) as con:
        assert con.execute("SELECT COUNT(*) FROM sources").fetchone() == (records,)


def test_a_scan_imports_no_sqlalchemy_and_its_workers_start_warm(tmp_path):
    """`scan` of a SQLite index reads it through `index_store.snapshot` and never imports
    SQLAlchemy; its pool's forkserver runs `scan.verify.warm_up` before forking, so a worker
    starts with the guard without extra units built and the verification kernel loaded."""
    records = workers.POOL_RECORDS + 60  # over the threshold: scan runs a pool
    pkg = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": f"Record {i % 1000} of the day, long enough to be signed: " * 3}
        for i in range(records)]})
    idx = tmp_path / "index.sqlite"
    assert run_cli("--index", idx, "index", "--inputs", pkg)[0] == 0
    done = _python(f"""
        import sys
        from near_dedup_core import cli, workers
        code = cli.main(["--quiet", "--index", {str(idx)!r}, "scan", "--inputs", {str(pkg)!r},
                         "--output", {str(tmp_path / "report")!r}, "--workers", "2"])
        probe = ("(__import__('near_dedup_core.guard').guard._guard.cache_info().currsize, "
                 "len(__import__('near_dedup_core.signature').signature"
                 "._pair_common_utf8.signatures))")
        with workers.process_pool(2) as ex:
            guards, kernels = ex.submit(eval, probe).result()
        print(code, "sqlalchemy" in sys.modules, guards, kernels)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    code, sqlalchemy, guards, kernels = done.stdout.splitlines()[-1].split()
    assert (code, sqlalchemy, guards) == ("0", "False", "1") and int(kernels) >= 1
    assert (tmp_path / "report" / "decisions.jsonl").exists()


def test_bulk_work_and_workers_collect_rarely_and_the_thresholds_come_back(tmp_path):
    done = _python("""
        import gc
        from near_dedup_core import collector, workers
        gc.set_threshold(700, 10, 10)
        try:
            with collector.rare_collections():
                inside = gc.get_threshold()
                with workers.process_pool(2) as ex:
                    in_worker = ex.submit(gc.get_threshold).result()
                raise KeyError("out")
        except KeyError:
            pass
        print(*inside, *in_worker, *gc.get_threshold())
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    young = collector.YOUNG_THRESHOLD
    assert done.stdout.split() == [str(x) for x in (young, 10, 10, young, 10, 10, 700, 10, 10)]


def test_the_cli_process_imports_and_runs_with_the_bulk_threshold(tmp_path):
    """`console_main` raises the young threshold before the command imports anything heavy
    (numba's objects would otherwise set off full collections during the imports); `main`,
    called in a process that goes on, leaves the caller's thresholds alone."""
    done = _python("""
        import gc, sys
        from near_dedup_core import cli
        gc.set_threshold(700, 10, 10)
        def command(argv=None):
            print(*gc.get_threshold())
            return 0
        main, cli.main = cli.main, command
        try:
            cli.console_main()
        except SystemExit as exit:
            print("exit", exit.code)
        gc.set_threshold(700, 10, 10)
        code = main(["report", "verify", "no-such-report"])
        print("main", code, *gc.get_threshold())
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    young = collector.YOUNG_THRESHOLD
    assert done.stdout.split() == [str(young), "10", "10", "exit", "0",
                                   "main", "1", "700", "10", "10"]


def _pipe_max_size() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as fh:
            return int(fh.read())
    except OSError:
        return 0


@pytest.mark.skipif(_pipe_max_size() < workers.PIPE_BYTES,
                    reason="needs Linux with /proc/sys/fs/pipe-max-size of at least 1 MiB")
def test_a_pools_pipes_hold_a_task_with_its_dictionary_and_most_of_a_result():
    import fcntl

    get_size = 1032  # F_GETPIPE_SZ
    with workers.process_pool(2) as ex:
        assert ex.submit(len, b"x" * 300_000).result() == 300_000
        sizes = [fcntl.fcntl(q._reader.fileno(), get_size)
                 for q in (ex._call_queue, ex._result_queue)]
    assert sizes == [workers.PIPE_BYTES, workers.PIPE_BYTES]


def test_the_forkserver_of_a_command_that_normalizes_builds_the_table(tmp_path):
    done = _python("""
        import near_dedup_core.ingest.work
        from near_dedup_core import workers
        from near_dedup_core.normalize import _tables
        for name in workers._preload():
            __import__(name)
        print(_tables.cache_info().currsize)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]


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
