"""`bench/lookups.py` (docs/measurements/2026-12-06-day-4.md) on a small Iceberg index: the
lookups run in a process of their own, find none of the random ids, and keep no file open:
the files' Bloom filters turn the random ids away, so no row group is read again. With a
share of the index's own ids (``known``), a file read again is kept open, unless
``footer_chunks`` is 0."""

from __future__ import annotations

import pytest
from helpers import make_package, run_cli, stdlib_paragraphs

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from bench import lookups  # noqa: E402


@pytest.mark.slow  # an index and five interpreters of its own
def test_bench_lookups_measures_a_days_lookups_in_a_process_of_their_own(tmp_path):
    texts = stdlib_paragraphs()[:40]
    pkg = make_package(tmp_path, "cpt-v1", {"train": [{"id": f"a{i}", "text": t}
                                                      for i, t in enumerate(texts)]})
    location = f"iceberg://{tmp_path / 'index'}"
    code, _, err = run_cli("--quiet", "--index", location, "index", "--inputs", pkg,
                           "--workers", "1")
    assert code == 0, err
    once = lookups.measure(location, calls=1, keys=5)
    twice = lookups.measure(location, calls=2, keys=5, code=lookups.ROOT)
    assert once["calls"] == 1 and twice["calls"] == 2
    assert once["found"] == twice["found"] == 0
    assert once["cpu_s"] >= 0 and once["peak_rss_mib"] > 0
    assert once["files_kept_open"] == twice["files_kept_open"] == 0
    # half of each call's ids the index's own: read, and the file kept open from its second
    # read on, unless no footer may be kept
    known = lookups.measure(location, calls=2, keys=8, known=0.5)
    assert known["found"] >= 2 and known["files_kept_open"] == 1, known
    none_kept = lookups.measure(location, calls=2, keys=8, known=0.5, footer_chunks=0)
    assert none_kept["found"] == known["found"] and none_kept["files_kept_open"] == 0
    with pytest.raises(SystemExit, match="bench.lookups:"):
        lookups.measure(f"iceberg://{tmp_path / 'none'}", calls=1, keys=1)
