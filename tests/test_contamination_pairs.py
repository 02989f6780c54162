"""The pairs of an indexed pool held as columns (`contamination.pairs.PairTable`): the same
pairs, in the same report order, as one `Pair` made for each (sample, hit of its content)."""

from __future__ import annotations

import random
from typing import NamedTuple

import numpy as np

from near_dedup_core.contamination.items import EvalItem, SampleRef
from near_dedup_core.contamination.pairs import Pair, PairTable, in_report_order
from near_dedup_core.contamination.probe import Hits


class Hit(NamedTuple):
    """One row of `Hits`."""

    sample: int
    item: int
    common: int
    start: int
    end: int
    compare_numbers: bool
    method: str
    text: str


def _hits(rng: random.Random, contents: int, items: int) -> list[Hit]:
    """Hits of a worker's jobs: each content with none, one or several items, by either
    method, the spans of one text repeated."""
    out = []
    for c in range(contents):
        for it in rng.sample(range(items), rng.choice([0, 0, 1, 1, 2, 3])):
            for method in rng.sample(["containment", "exact"], rng.randint(1, 2)):
                start = rng.randint(0, 50)
                out.append(Hit(c, it, rng.randint(1, 40), start, start + rng.randint(1, 30),
                               method == "containment" or rng.random() < 0.3, method,
                               rng.choice(["default", "return", f"text {c}"])))
    return sorted(out)


def _columns(job: list[Hit], first: int) -> Hits:
    def column(values: list) -> np.ndarray:
        return np.asarray(values, dtype=bool if isinstance(values[0], bool) else np.int64)

    return Hits(column([h.sample - first for h in job]), column([h.item for h in job]),
                column([h.common for h in job]), column([h.start for h in job]),
                column([h.end for h in job]), column([h.compare_numbers for h in job]),
                column([h.method == "exact" for h in job]), [h.text for h in job])


def test_a_table_of_pairs_is_the_pairs_made_one_by_one():
    rng = random.Random(3)
    contents, items = 300, 12
    hits = _hits(rng, contents, items)
    # three packages of samples; a content is held by several samples, or by none
    packages = [[(position, f"s{p}-{position}", "train", "a.jsonl", position + 1, None,
                  rng.randrange(contents)) for position in range(rng.randint(50, 400))]
                for p in range(3)]
    pool = ["p0", "p1", "p2"]
    of_sample = np.asarray([row[6] for rows in packages for row in rows], dtype=np.int64)
    starts = np.cumsum([0] + [len(rows) for rows in packages])
    package = np.repeat(np.arange(3, dtype=np.int64), np.diff(starts))

    def sample_ref(k: int) -> SampleRef:
        p = int(package[k])
        position, sample_id, split, file, line, domain, _ = packages[p][k - int(starts[p])]
        return SampleRef(p, position, pool[p], sample_id, split, file, line, domain)

    def positions(ks: np.ndarray) -> np.ndarray:
        return np.asarray([sample_ref(int(k)).position for k in ks], dtype=np.int64)

    # the jobs' hits, a job's contents numbered from its first, the jobs in any order
    parts, content = [], []
    for lo in rng.sample(range(0, contents, 64), len(range(0, contents, 64))):
        job = [h for h in hits if lo <= h.sample < lo + 64]
        if job:
            parts.append(_columns(job, lo))
            content.append(lo + parts[-1].sample)
    table = PairTable.join(of_sample, Hits.concat(parts), np.concatenate(content), package,
                           positions, sample_ref)

    by_content: dict[int, list[Hit]] = {}
    for h in hits:
        by_content.setdefault(h.sample, []).append(h)
    want = [Pair(h.item, sample_ref(k), h.common, h.start, h.end, h.compare_numbers, h.method,
                 h.text)
            for k in range(len(of_sample)) for h in by_content.get(int(of_sample[k]), [])]
    assert len(want) > 300 and list(table) == want
    assert table[len(want) - 1] == want[-1] and table[2:5] == want[2:5]

    evals = [EvalItem(SampleRef(0, rng.randrange(items), "evals", f"q{i}", "test", "e.jsonl",
                                i + 1, None), f"item {i}") for i in range(items)]
    ordered, columns = in_report_order(table, evals)
    place = {i: r for r, i in enumerate(sorted(range(items),
                                                key=lambda i: (evals[i].ref.key(), i)))}
    want = sorted(want, key=lambda p: (place[p.item], p.sample.input_pos, p.sample.position,
                                       p.method != "exact"))
    assert list(ordered) == want
    assert columns.item.tolist() == [p.item for p in want]
    assert columns.package.tolist() == [p.sample.input_pos for p in want]
    assert columns.position.tolist() == [p.sample.position for p in want]
    assert columns.exact.tolist() == [p.method == "exact" for p in want]
    assert columns.common.tolist() == [p.common for p in want]
