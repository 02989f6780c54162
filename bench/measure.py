"""Run one command and measure it: wall, user and system CPU, CPU share and peak memory.

``/usr/bin/time -v`` (Debian package ``time``) gives wall, CPU and the peak RSS of the largest
single process, but only of processes that the command waits for: workers started through a
multiprocessing forkserver are children of the forkserver, which nobody reaps, so their CPU and
memory never reach ``time``. The process tree is therefore also sampled every 0.2 s with
psutil: summed RSS (an upper bound: pages shared between processes count once per process) and
the CPU time last seen of every process that ever appeared in the tree.

The box is shared: its own stalls are counted over each command as well (`BoxStalls`), so that
a wall time can be read against them: the seconds in which every running task of the machine
waited for I/O or for memory (Linux pressure stall information, ``/proc/pressure``), and the
CPU time the hypervisor gave to others (``steal`` in ``/proc/stat``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

TIME = "/usr/bin/time"


@dataclass
class BoxStalls:
    """Seconds the whole machine stalled: every non-idle task waiting for I/O (``io_full_s``)
    or for memory reclaim (``memory_full_s``), and CPU time stolen by the hypervisor, summed
    over the cores (``steal_s``). None where the kernel does not report it."""

    io_full_s: float | None = None
    memory_full_s: float | None = None
    steal_s: float | None = None

    def __sub__(self, before: BoxStalls) -> BoxStalls:
        return self._combine(before, -1)

    def __add__(self, other: BoxStalls) -> BoxStalls:
        return self._combine(other, 1)

    def _combine(self, other: BoxStalls, sign: int) -> BoxStalls:
        def part(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + sign * b

        return BoxStalls(part(self.io_full_s, other.io_full_s),
                         part(self.memory_full_s, other.memory_full_s),
                         part(self.steal_s, other.steal_s))

    def note(self) -> str:
        """``box stalls: I/O 3.1 s, memory 0.0 s, steal 0.2 s`` (what the kernel reports)."""
        parts = [f"{label} {value:.1f} s" for label, value in
                 (("I/O", self.io_full_s), ("memory", self.memory_full_s),
                  ("steal", self.steal_s)) if value is not None]
        return f"box stalls: {', '.join(parts)}" if parts else "box stalls: not reported"


def box_stalls() -> BoxStalls:
    """The machine's stall counters since boot (see `BoxStalls`)."""

    def full_total(resource: str) -> float | None:
        try:
            text = Path(f"/proc/pressure/{resource}").read_text()
        except OSError:
            return None
        m = re.search(r"^full .*\btotal=(\d+)", text, re.MULTILINE)
        return int(m.group(1)) / 1e6 if m else None

    steal = None
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        if fields[0] == "cpu" and len(fields) > 8:
            steal = int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    return BoxStalls(full_total("io"), full_total("memory"), steal)


@dataclass
class Measurement:
    command: list[str]
    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    cpu_percent: float
    max_rss_process_mib: float
    peak_tree_rss_mib: float
    tree_cpu_s: float
    stdout: str
    stderr_tail: str
    box: BoxStalls = field(default_factory=BoxStalls)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the whole tree: the larger of time's count and the sampled one."""
        return max(self.user_s + self.sys_s, self.tree_cpu_s)

    @property
    def cpu_share(self) -> float:
        """Average number of busy cores (2.0 = both cores all the time)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cpu_s"] = self.cpu_s
        d["cpu_share"] = self.cpu_share
        return d


def _sample_tree(proc: psutil.Process, cpu_seen: dict[int, float]) -> int:
    """Summed RSS of the tree now; records each process's CPU seconds in ``cpu_seen``."""
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            with p.oneshot():
                total += p.memory_info().rss
                t = p.cpu_times()
                cpu_seen[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return total


def _parse_time_v(text: str) -> dict[str, float]:
    def grab(label: str) -> str:
        m = re.search(rf"^\s*{re.escape(label)}: (.+)$", text, re.MULTILINE)
        if not m:
            raise RuntimeError(f"measure: '{label}' not in /usr/bin/time output")
        return m.group(1).strip()

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    seconds = 0.0
    for part in wall.split(":"):
        seconds = seconds * 60 + float(part)
    return {
        "wall_s": seconds,
        "user_s": float(grab("User time (seconds)")),
        "sys_s": float(grab("System time (seconds)")),
        "cpu_percent": float(grab("Percent of CPU this job got").rstrip("%") or 0),
        "max_rss_process_mib": int(grab("Maximum resident set size (kbytes)")) / 1024,
    }


def run(command: list[str], log: Path, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> Measurement:
    """Run ``command`` under ``/usr/bin/time -v`` (in ``env``, this process's environment by
    default); its stderr (progress, then the time report) goes to ``log``. Returns the
    measurement; a non-zero exit is recorded, not raised."""
    if shutil.which(TIME) is None:
        raise SystemExit("measure: /usr/bin/time is missing: apt-get install time")
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = 0
    cpu_seen: dict[int, float] = {}
    stalls = box_stalls()
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen([TIME, "-v", *command], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        ps = psutil.Process(proc.pid)
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _sample_tree(ps, cpu_seen))
                stop.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stdout, _ = proc.communicate()
        stalls = box_stalls() - stalls
        stop.set()
        sampler.join()
    text = log.read_text(encoding="utf-8", errors="replace")
    stats = _parse_time_v(text)
    # The tree includes /usr/bin/time itself (~2 MiB); it is left in.
    before_report = text.split("\tCommand being timed:")[0].strip().splitlines()
    return Measurement(command=command, returncode=proc.returncode, stdout=stdout.strip(),
                       peak_tree_rss_mib=peak / 2**20, tree_cpu_s=sum(cpu_seen.values()),
                       stderr_tail="\n".join(before_report[-3:]), box=stalls,
                       **stats)


def code_version(root: Path) -> dict:
    """Which code was measured: git HEAD and a digest of the near_dedup_core sources, its
    subpackages' included (the work tree may hold changes not yet committed)."""
    import hashlib

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True).stdout.strip()
    h = hashlib.sha256()
    package = root / "near_dedup_core"
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return {"git_head": head, "near_dedup_core_sha256": h.hexdigest()[:16]}


def wall_clock() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def read_through(*paths: Path) -> None:
    """Read every file under ``paths`` once, so that a command measured next finds its inputs
    in the page cache. The benchmark box reclaims page-cache pages that sit idle for some
    minutes on its own (the kernel's DAMON ``pageout`` scheme): a 1M pool last read before
    the previous command can be read from disk again, which the command's wall time would
    then include (3.9 GB: 55 s from disk, 0.6 s from the cache)."""
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            with open(file, "rb", buffering=0) as fh:
                while fh.read(1 << 24):
                    pass


def copy_index(src: Path, dst: Path) -> None:
    """Copy a SQLite index (and its ``-wal``, if any) over ``dst``, and write the copy to disk
    before returning.

    An index that a daily batch appends to was written on an earlier day: its pages are on
    disk. A fresh copy is not: the kernel writes its dirty pages back while the measured
    command runs, and the command runs slower meanwhile. On the benchmark box, a 2.3 GB copy
    left dirty added 2–6 s to a 25 s append (round fourteen in `git log -p docs/benchmarks.md`)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    for suffix in ("", "-wal"):
        source = Path(f"{src}{suffix}")
        if source.exists():
            target = Path(f"{dst}{suffix}")
            shutil.copyfile(source, target)
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
