"""Summarize a py-spy ``--format raw`` profile (collapsed stacks): where the samples are.

py-spy's raw output has one line per distinct stack, ``frame;frame;...;frame count``, frames
written as ``function (file:line)``; with ``--subprocesses`` each stack starts with its chain of
processes. This prints, for the main process and for the pool workers together, the share of samples whose innermost frame is a project or library
function (self time, by function and file) and the share of samples that pass through each
``near_dedup_core`` function (inclusive time), so a profile can be quoted in a few lines.

    .venv/bin/py-spy record --subprocesses --format raw -o prof.txt -- <command>
    .venv/bin/python -m bench.profile_summary prof.txt
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short(frame: str, with_line: bool = False) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m.group("file")
    for marker in ("near_dedup_core/", "site-packages/", "lib/python3.11/"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    line = f":{m.group('line')}" if with_line and m.group("line") else ""
    return f"{m.group('func')} ({file}{line})"


def summarize(path: Path, top: int = 12) -> str:
    by_process: dict[str, Counter] = defaultdict(Counter)
    inclusive: dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        # With --subprocesses each stack starts with its process chain: the command, then a
        # forkserver and a worker when the work runs in a pool. Workers are summed together.
        chain = [f for f in frames if f.startswith("process ")]
        body = [f for f in frames if not f.startswith("process ")]
        if len(chain) <= 1:
            process = "main process"
        elif len(chain) == 2:
            process = "direct children of the main process"
        else:
            process = "pool workers (forkserver children, summed)"
        totals[process] += n
        if body:
            by_process[process][_short(body[-1], with_line=True)] += n
        seen = set()
        for frame in body:
            if "near_dedup_core/" in frame:
                name = _short(frame)
                if name not in seen:
                    seen.add(name)
                    inclusive[process][name] += n
    lines = []
    grand = sum(totals.values())
    lines.append(f"{grand} samples in all; shares below are of each process group's samples")
    for process, total in totals.most_common():
        lines.append(f"{process}: {total} samples ({100 * total / grand:.0f}% of all)")
        lines.append("  self time (innermost frame):")
        for name, n in by_process[process].most_common(top):
            lines.append(f"    {100 * n / total:5.1f}%  {name}")
        if inclusive[process]:
            lines.append("  inclusive (near_dedup_core functions on the stack):")
            for name, n in inclusive[process].most_common(top):
                lines.append(f"    {100 * n / total:5.1f}%  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.profile_summary",
                                description=__doc__.splitlines()[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    print(summarize(args.profile, args.top))


if __name__ == "__main__":
    main()
