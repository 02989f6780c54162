"""Compile and cache the numba kernels once, so that no user command pays for it.

The kernels are compiled with ``cache=True``: the first process that calls one with a given
set of argument types compiles it (up to a few seconds in all) and stores the machine code
next to the module (``__pycache__/*.nbi``/``*.nbc``, keyed by the source's contents and the
CPU); every later process loads it in milliseconds. Right after an install no such file
exists, so the first `index` took about 1 s of CPU more and the first `scan` about 2.5 s more.
``make install`` runs this script to take that cost at install time: it runs the commands of
the daily flow on the bundled samples (`index` day by day, `scan` with and without history,
an SFT index and scan, `contamination`, `index find`) in a temporary folder, in this one process, inline
(``--workers 1``), which compiles the kernels for the argument types those commands use. A
rarer combination of types (e.g. a batch whose text fits one byte per code point when the
samples needed four) is still compiled on first use, once, and cached from then on.
"""

import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def commands(tmp: Path) -> list[list[str]]:
    days = sorted((SAMPLES / "cpt").glob("*/cpt-*"))
    sft = sorted((SAMPLES / "sft").glob("sft-*"))
    cpt_index = ["--index", str(tmp / "cpt.sqlite")]
    sft_index = ["--index", str(tmp / "sft.sqlite")]
    one = ["--workers", "1"]
    runs = [[*cpt_index, "index", "--inputs", str(day), *one] for day in days]
    runs.append([*cpt_index, "scan", "--inputs", *map(str, days), "--output",
                 str(tmp / "cpt-all"), *one])
    runs.append([*cpt_index, "scan", "--inputs", str(days[-1]), "--output",
                 str(tmp / "cpt-last"), *one])
    # (an SFT version is indexed with the versions it refers to; indexed ones are skipped)
    runs += [[*sft_index, "index", "--inputs", *map(str, sft[:i + 1]), *one]
             for i in range(len(sft))]
    runs.append([*sft_index, "scan", "--inputs", *map(str, sft), "--output", str(tmp / "sft"),
                 *one])
    runs.append(["contamination", "--evals", str(days[0]), "--inputs", str(days[-1]),
                 "--output", str(tmp / "contamination"), *one])
    runs.append([*cpt_index, "index", "find", "--package", str(days[-1]), "--sample",
                 "web-0009", *one])
    return runs


def warm_normalize() -> None:
    """The per-character table path of `normalize.normalize_many`, which only batches with
    more non-ASCII text than the samples hold take."""
    from near_dedup_core import normalize

    limit = normalize.TABLE_MIN_CHARS
    normalize.TABLE_MIN_CHARS = 0
    try:
        normalize.normalize_many(["Straße  Ünïcödé", "中文，测试。", "ascii Text"])
    finally:
        normalize.TABLE_MIN_CHARS = limit


def main() -> int:
    from near_dedup_core.cli import main as cli

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="near-dedup-warm-") as tmp:
        for argv in commands(Path(tmp)):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = cli(["--quiet", *argv])
            if code != 0:
                print(f"warm_caches: near-dedup {' '.join(argv)} failed with exit {code}",
                      file=sys.stderr)
                return 1
    warm_normalize()
    print(f"numba kernels compiled and cached in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
