"""Commands under an address-space cap (RLIMIT_AS, as ``ulimit -v`` sets it) end by
themselves: whatever runs out first (a thread's stack, a worker's import, an array, the
feeder thread of the process pool), the command exits 1 or 2 with exactly one stderr line
and leaves no temporary behind, or it completes. Each run has a hard timeout: a command that
waits for work a thread never started fails the test instead of hanging it."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_package
from test_reliability import docs, env_with, texts

#: Records of the scanned pool: well over `workers.POOL_RECORDS`, so that scan and index run
#: their process pool and its threads.
RECORDS = 6000
#: Caps (MiB) from "no thread can start" to "the scan completes", through the caps where
#: threads and arrays fail to be allocated in turn, measured on this pool in steps of 2–5 MiB
#: (docs/reliability.md). Before the scan took its writer thread and kernels at its start
#: (`scan.reserve`), numba's late load of a kernel aborted it in LLVM at 385 and 405 MiB;
#: before it asked for room ahead of orjson (`scan.write.headroom`), orjson's segmentation
#: fault ended it at 395 (now the `out of memory` line, at 396–402 as at 400).
SCAN_CAPS = [300, 385, 400, 405, 450, 800]
#: At 310 MiB `index` printed multiprocessing's traceback after its line (the pool's
#: temporary folder could not be listed at exit); at 320–380 it said "Cannot allocate
#: memory" without saying that memory ran out.
INDEX_CAPS = [300, 310, 350, 450, 700]
#: What a refusal under a cap names: memory.
MEMORY_WORDS = ("out of memory", "as happens when memory runs out", "a worker process died")
#: A run that takes longer than this is taken for a hang (a healthy one takes seconds).
HANG = 120


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> tuple[Path, Path]:
    """A package of `RECORDS` records of real text with near copies, and an index of it."""
    root = tmp_path_factory.mktemp("exhaustion")
    package = make_package(root, "cpt-big", {"train": docs("z", texts(7, RECORDS))},
                           shard_records=2000)
    index = root / "index" / "cpt.sqlite"
    done = capped(None, "--index", index, "index", "--inputs", package, "--workers", 1)
    assert done.returncode == 0, done.stderr
    return package, index


def capped(limit_mib: int | None, *argv: object) -> subprocess.CompletedProcess:
    """``near-dedup --quiet argv…`` in a process whose address space is capped at
    ``limit_mib`` MiB (uncapped for None), killed if it outlives `HANG` seconds."""
    def cap() -> None:
        if limit_mib is not None:
            limit = limit_mib << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        return subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet",
                               *map(str, argv)], preexec_fn=cap, env=env_with(),
                              capture_output=True, text=True, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, argv))} under a {limit_mib} MiB cap did not end "
                    f"within {HANG} s")


def ended_cleanly(done: subprocess.CompletedProcess, limit_mib: int) -> bool:
    """Whether the run completed (True) or was refused in one line (False); anything else
    fails the test."""
    where = f"under a {limit_mib} MiB cap"
    if done.returncode == 0:
        assert done.stderr == "", (where, done.stderr)
        return True
    assert done.returncode in (1, 2), (where, done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("near-dedup: error: ") and done.stderr.count("\n") == 1, \
        (where, done.stderr[-2000:])
    assert done.stdout == "", (where, done.stdout)
    assert any(words in done.stderr for words in MEMORY_WORDS), (where, done.stderr)
    return False


@pytest.mark.slow
def test_scan_under_any_address_space_cap_ends_by_itself_in_one_line(pool, tmp_path):
    package, index = pool
    outcomes = {}
    for limit in SCAN_CAPS:
        out = tmp_path / f"cap-{limit}"
        out.mkdir()
        done = capped(limit, "--index", index, "scan", "--inputs", package, "--output",
                      out / "report", "--workers", 2)
        published = ended_cleanly(done, limit)
        # nothing half-published: the report whole, or nothing (no .report.tmp-PID)
        assert sorted(p.name for p in out.iterdir()) == (["report"] if published else []), \
            (limit, done.stderr)
        outcomes[limit] = published
    assert not outcomes[SCAN_CAPS[0]] and outcomes[SCAN_CAPS[-1]], outcomes


@pytest.mark.slow
def test_index_under_any_address_space_cap_ends_by_itself_in_one_line(pool, tmp_path):
    package, _ = pool
    outcomes = {}
    for limit in INDEX_CAPS:
        index = tmp_path / f"cap-{limit}" / "cpt.sqlite"
        done = capped(limit, "--index", index, "index", "--inputs", package, "--workers", 2)
        built = ended_cleanly(done, limit)
        # a first batch that failed removes the folder it created, temporary file and all
        assert index.parent.exists() == built, (limit, done.stderr)
        if built:
            assert sorted(p.name for p in index.parent.iterdir()) == ["cpt.sqlite"]
        outcomes[limit] = built
    assert not outcomes[INDEX_CAPS[0]] and outcomes[INDEX_CAPS[-1]], outcomes


_LATE_LOADS = """
import json, sys, threading
from numba.core.dispatcher import Dispatcher
from near_dedup_core import cli
from near_dedup_core.scan import reserve

loaded = []  # (kernel, thread) of each overload added once the writer's first task is done
ready = threading.Event()
load_kernels = reserve.load_kernels

def preload(inline=False):
    load_kernels(inline)
    ready.set()

compile_ = Dispatcher.compile

def compile(self, sig):
    before = len(self.overloads)
    try:
        return compile_(self, sig)
    finally:
        if ready.is_set() and len(self.overloads) > before:
            loaded.append([self.py_func.__qualname__, threading.current_thread().name])

if __name__ == "__main__":
    reserve.load_kernels = preload
    Dispatcher.compile = compile
    code = cli.main(["--quiet", *sys.argv[1:]])
    print(json.dumps({"code": code, "ready": ready.is_set(), "late": loaded}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_scan_loads_its_kernels_and_starts_its_writer_thread_at_its_start(pool, tmp_path,
                                                                             workers):
    """numba loads a kernel (or compiles it) at its first call, in LLVM, which aborts the
    process when memory runs out; a thread first touching a library's thread-local data
    aborts in glibc. So the scan's writer thread starts, and loads every kernel the scan's
    own process runs, before the scan does anything else: the scan, inline or with its
    process pool, loads no kernel after that (a kernel called with other argument types
    would be)."""
    package, index = pool
    script = tmp_path / "late.py"
    script.write_text(_LATE_LOADS)
    done = subprocess.run([sys.executable, str(script), "--index", str(index), "scan",
                           "--inputs", str(package), "--output", str(tmp_path / "report"),
                           "--workers", str(workers)], env=env_with(), capture_output=True,
                          text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"code": 0, "ready": True, "late": []}


_WAITS_FOR_A_FAILED_THREAD = """
import sys, threading
from concurrent.futures import Future
from pathlib import Path
from near_dedup_core import cli
from near_dedup_core.fsutil import atomic_dir

def command(args):
    result = Future()

    def feed():  # as a process pool's manager thread starts its feeder thread
        raise {exc}
        result.set_result(None)

    with atomic_dir(Path(sys.argv[-1])):
        threading.Thread(target=feed, name="feeder").start()
        result.result()  # waits for work that the failed thread never does

if __name__ == "__main__":
    cli.run = command
    target = sys.argv[1]
    sys.argv = ["near-dedup", "--quiet", "report", "verify", target]
    cli.console_main()
"""


@pytest.mark.parametrize("exc,line", [
    ('RuntimeError("can\'t start new thread")',
     "near-dedup: error: out of memory (can't start new thread); nothing was changed; try "
     "fewer --workers or a smaller input pool\n"),
    ("MemoryError()", "near-dedup: error: out of memory; nothing was changed; try fewer "
                      "--workers or a smaller input pool\n"),
    ('KeyError("x")', "near-dedup: error: unexpected KeyError in a thread: 'x'; nothing was "
                      "changed\n"),
])
def test_a_thread_that_fails_stops_the_command_in_one_line(tmp_path, exc, line):
    """A thread ends with an exception while the command waits for its work: the command
    stops (its temporary folder removed) with one line, instead of a traceback and a
    wait that never ends."""
    script = tmp_path / "waits.py"
    script.write_text(_WAITS_FOR_A_FAILED_THREAD.replace("{exc}", exc))
    out = tmp_path / "out" / "report"
    out.parent.mkdir()
    try:
        done = subprocess.run([sys.executable, str(script), str(out)], env=env_with(),
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the command waited for the failed thread's work")
    assert (done.returncode, done.stderr) == (1, line)
    assert list(out.parent.iterdir()) == []


_EXITS_WITHOUT_MEMORY = """
import errno, os, sys
from multiprocessing import util
from near_dedup_core import workers

def no_memory(*_args, **_kwargs):
    raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

if __name__ == "__main__":
    workers.start_forkserver()
    print(util.get_temp_dir(), flush=True)
    os.scandir = no_memory  # as when memory ran out: a folder cannot be listed any more
    os.listdir = no_memory
"""


def test_the_pools_temporary_folder_is_removed_at_exit_without_listing_it(tmp_path):
    """multiprocessing removes its temporary folder (the forkserver's socket) at exit with
    ``shutil.rmtree``, which lists it: a command that ended because memory ran out printed
    that traceback after its one line (`index` under a 310 MiB cap) and left the folder.
    It is removed by name, and nothing is printed."""
    script = tmp_path / "exits.py"
    script.write_text(_EXITS_WITHOUT_MEMORY)
    done = subprocess.run([sys.executable, str(script)], env=env_with(), capture_output=True,
                          text=True, timeout=HANG)
    folder = Path(done.stdout.strip())
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]
    assert folder.name.startswith("pymp-") and not folder.exists()


_FLOATS_WITHOUT_ROOM = """
import resource, sys
import numpy as np
from near_dedup_core.scan.write import _float_json

if __name__ == "__main__":
    values = np.random.default_rng(0).random(200_000)
    status = open("/proc/self/status").read().split("VmSize:")[1]
    limit = (int(status.split()[0]) << 10) + (64 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    hold = []
    try:  # take the address space a MiB at a time, then give back 8 MiB
        while True:
            hold.append(np.ones(1 << 20, dtype=np.uint8))
    except MemoryError:
        del hold[-8:]
    try:
        print(len(_float_json(values)))
    except MemoryError:
        print("MemoryError")
"""


def test_report_json_is_rendered_only_where_memory_is_there_for_it(tmp_path):
    """orjson does not check its own allocations: an output buffer it cannot grow is a
    segmentation fault (a scan under a 395 MiB cap died so, its staging folder left). The
    report's writer asks for the room first, where running out is a MemoryError (the
    command's one line): 200,000 Jaccards' JSON (4 MB) with 8 MiB left."""
    script = tmp_path / "floats.py"
    script.write_text(_FLOATS_WITHOUT_ROOM)
    done = subprocess.run([sys.executable, str(script)], env=env_with(), capture_output=True,
                          text=True, timeout=HANG)
    assert (done.returncode, done.stdout, done.stderr) == (0, "MemoryError\n", "")
