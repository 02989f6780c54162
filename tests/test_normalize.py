"""`normalize_many` (the compiled batch path) gives exactly `normalize` of each text."""

from __future__ import annotations

import random

import numpy as np
import pytest

from near_dedup_core import normalize as nm


@pytest.fixture
def with_table(monkeypatch):
    """Small batches take the per-character table too."""
    monkeypatch.setattr(nm, "TABLE_MIN_CHARS", 0)


def test_every_bmp_character_alone(with_table):
    chars = [chr(c) for c in range(0x10000)]
    assert nm.normalize_many(chars) == [nm.normalize(c) for c in chars]


def test_random_mixes_of_characters_that_interact(with_table):
    rng = random.Random(3)
    interacting = ([chr(c) for c in range(0x300, 0x370)]          # combining marks
                   + [chr(c) for c in range(0x1100, 0x1200)]      # Hangul jamo
                   + [chr(c) for c in range(0x3131, 0x318F)]      # compatibility jamo
                   + ["위", "가", "e", "A", "ß", "ﬁ", "Å", "\u00a8", "\u0d4a", "\u0d3e"])
    spaces = [" ", "\t", "\n", "\u3000", "\u00a0", "\u2028", "\x1f"]
    wide = ["\U0001f600", "\U0001d400", "\U0002f800", "\U00010400", "\ud800"]
    every = [chr(c) for c in range(0x10000)]
    texts = []
    for _ in range(20000):
        n = rng.randint(0, 40)
        texts.append("".join(rng.choice(rng.choice((interacting, spaces, wide, every, every)))
                             for _ in range(n)))
    assert nm.normalize_many(texts) == [nm.normalize(t) for t in texts]


def test_folds_that_grow_and_whitespace_at_the_edges(with_table):
    texts = ["\ufdfa" * 500, " \u3000ＡＢＣ，１２３\u2003 ", "ǅ Ǆ ǆ", "İstanbul ΣΑΣ", "\t\n",
             "", "a\u0301", "\u1100\u1161\u11a8", "ｶﾞ", "㎏ ㍱ ⑴", "\u00a0x\u00a0"]
    assert nm.normalize_many(texts) == [nm.normalize(t) for t in texts]


@pytest.mark.parametrize("table", [False, True], ids=["small-batch", "table"])
def test_ascii_and_mixed_batches(monkeypatch, table):
    if table:
        monkeypatch.setattr(nm, "TABLE_MIN_CHARS", 0)
    texts = ["Hello,  World!\t\x1cX", "  lead and trail  ", "Ünïcödé  Straße", "中文，测试。",
             "MiXeD ASCII\r\nlines\x0b", "Привет,  Мир"] * 50
    assert nm.normalize_many(texts) == [nm.normalize(t) for t in texts]


@pytest.mark.parametrize("table", [False, True], ids=["small-batch", "table"])
def test_code_points_of_a_batch_are_those_of_the_normalized_texts(monkeypatch, table):
    from near_dedup_core.signature import code_points

    if table:
        monkeypatch.setattr(nm, "TABLE_MIN_CHARS", 0)
    rng = random.Random(5)
    pool = ["Hello,  World!\t", "  lead  ", "Ünïcödé  Straße", "中文，测试。", "a\u0301b",
            "\ufdfa", "\U0001f600 x", "Привет,  Мир", "", " \u3000 "]
    for size in (0, 1, 7, 300):
        texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 4)))
                 for _ in range(size)]
        for batch in (texts, [t for t in texts if t.isascii()]):
            cps, offsets = nm.normalize_code_points(batch)
            want, want_offsets = code_points(nm.normalize_many(batch))
            assert cps.tolist() == want.tolist() and offsets.tolist() == want_offsets.tolist()
            assert [nm.text_at(cps, offsets, i) for i in range(len(batch))] == \
                [nm.normalize(t) for t in batch]
            for i, t in enumerate(batch):  # a span alone, as the string's slice
                norm = nm.normalize(t)
                start = rng.randint(0, len(norm) + 1)
                end = rng.randint(start, len(norm) + 2)
                assert nm.span_at(cps, offsets, i, start, end) == norm[start:end]


@pytest.mark.parametrize("table", [False, True], ids=["small-batch", "table"])
def test_spans_hash_as_the_strings_do(monkeypatch, table):
    """The code points `normalize_spans` keeps are those of its strings, whichever path a text
    took (ASCII, folded, `normalize` itself): signing from them, for the whole batch or a
    renumbered part of it, gives the signatures and set sizes of signing the strings."""
    from near_dedup_core.signature import MinHasher, renumber

    if table:
        monkeypatch.setattr(nm, "TABLE_MIN_CHARS", 0)
    rng = random.Random(9)
    pool = ["Hello,  World! 12 kg\t", "  lead  ", "Ünïcödé  Straße", "中文，测试。三万元",
            "a\u0301b", "\ufdfa", "\U0001f600 x", "Привет,  Мир", "", " \u3000 "]
    hasher = MinHasher(64, 3, 5)
    for size in (1, 7, 300):
        texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 6)))
                 for _ in range(size)]
        normalized, spans = nm.normalize_spans(texts)
        assert normalized == [nm.normalize(t) for t in texts]
        covered = sorted(r for part in spans for r in part.rows.tolist())
        assert len(covered) == len(set(covered))
        if table:  # only a text that took `normalize` itself is in no part
            assert set(range(size)) - set(covered) == {
                i for i, t in enumerate(texts) if not t.isascii() and
                ("\u0301" in t or "\U0001f600" in t)}
        want = hasher.signatures_and_sizes(normalized)
        got = hasher.signatures_and_sizes(normalized, spans)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        keep = sorted(rng.sample(range(size), (size + 1) // 2))
        new_row = np.full(size, -1, dtype=np.int64)
        new_row[keep] = np.arange(len(keep))
        part = [normalized[i] for i in keep]
        got = hasher.signatures_and_sizes(part, renumber(spans, new_row))
        assert np.array_equal(got[0], want[0][keep]) and np.array_equal(got[1], want[1][keep])
