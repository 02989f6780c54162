"""Run one command and print, every ``--every`` seconds, how many cores each process of its
tree used in that interval: where a run leaves a core idle, and which process is then alone.

The tree is walked with psutil (the forkserver's workers are grandchildren of the command);
each process gets a number in order of appearance, printed once with its command line. The
command's own stderr (progress lines) passes through, so the intervals can be read against
the stages. Lines go to stderr, the command's stdout is left alone.

Usage::

    python -m bench.timeline [--every 1] -- .venv/bin/python -m near_dedup_core ... index ...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil


def _cpu_by_pid(root: psutil.Process, numbers: dict[int, int], t0: float) -> dict[int, float]:
    found: dict[int, float] = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            cpu = proc.cpu_times()
            found[proc.pid] = cpu.user + cpu.system
            if proc.pid not in numbers:
                numbers[proc.pid] = len(numbers)
                print(f"{time.monotonic() - t0:7.2f} s  #{numbers[proc.pid]} is pid {proc.pid}: "
                      f"{' '.join(proc.cmdline())[-100:]}", file=sys.stderr)
        except psutil.NoSuchProcess:
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.timeline",
                                description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=1.0, help="seconds per interval")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given")
    t0 = time.monotonic()
    proc = subprocess.Popen(command)
    root = psutil.Process(proc.pid)
    numbers: dict[int, int] = {}
    before, t_before = _cpu_by_pid(root, numbers, t0), time.monotonic()
    while proc.poll() is None:
        time.sleep(args.every)
        now, t_now = _cpu_by_pid(root, numbers, t0), time.monotonic()
        dt = t_now - t_before
        per = {pid: (cpu - before.get(pid, 0.0)) / dt for pid, cpu in now.items()}
        cells = " ".join(f"#{numbers[pid]} {share:4.2f}"
                         for pid, share in sorted(per.items(), key=lambda x: numbers[x[0]]))
        print(f"{t_now - t0:7.2f} s  total {sum(per.values()):4.2f}  {cells}", file=sys.stderr,
              flush=True)
        before, t_before = now, t_now
    print(f"{time.monotonic() - t0:7.2f} s  exit {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
