"""Normalization, shingling, MinHash signatures, LSH band keys and exact Jaccard.

Texts are real prose: paragraphs of the docstrings of the running interpreter's standard
library, selected deterministically, so Jaccard values are those of natural text. Signatures
are checked against datasketch's MinHash fed the same shingles, against Python set arithmetic,
across processes and across ``index --workers``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash
from helpers import REPO, drop_every, make_package, reverse_every, run_cli, stdlib_paragraphs

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.ingest import batch as ingest_batch
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import (
    MinHasher,
    band_keys,
    band_keys_into,
    exact_jaccard,
    pair_jaccards,
    shingle_hashes,
    stored_values,
    utf8_batch,
)

K = 5
NUM_PERM = 128


# --------------------------------------------------------------------------- real prose


def string_shingles(normalized: str, k: int = K) -> set[str]:
    """The character k-shingles of a normalized text as Python strings (one for short text)."""
    if not normalized:
        return set()
    if len(normalized) < k:
        return {normalized}
    return {normalized[i:i + k] for i in range(len(normalized) - k + 1)}


def set_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


@lru_cache(maxsize=1)
def varied_pairs() -> tuple[tuple[str, str], ...]:
    """(original, edited) normalized paragraph pairs whose Jaccard spans about 0.2 to 1."""
    long = [p for p in stdlib_paragraphs() if len(p) >= 600]
    pairs = []
    for i, para in enumerate(long[:60]):
        every = (2, 3, 4, 6, 9, 14, 25, 60)[i % 8]
        edited = (reverse_every if i % 2 else drop_every)(para, every)
        if every == 2:
            edited = reverse_every(drop_every(edited, 3), 2)
        pairs.append((normalize(para), normalize(edited)))
    return tuple(pairs)


# --------------------------------------------------------------------------- normalization


@pytest.mark.parametrize("raw, expected", [
    ("ﬁnance ﬂow", "finance flow"),                        # NFKC ligatures
    ("ＡＢＣ　１２３", "abc 123"),                             # fullwidth letters, digits, space
    ("① ½ ㎏", "1 1⁄2 kg"),                                 # compatibility forms
    ("e\u0301te\u0301", "été"),                             # composition
    ("Straße GROSS", "strasse gross"),                      # casefold, not lower
    ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),                                 # casefold of final sigma
    ("  tabs\tand\nnew\r\nlines  ", "tabs and new lines"),
    ("nbsp\u00a0thin\u2009ideographic\u3000line\u2028end", "nbsp thin ideographic line end"),
    ("unit\x1fsep\x1crec", "unit sep rec"),                 # ASCII separators are whitespace
    ("", ""),
    (" \t\n ", ""),
])
def test_normalize_nfkc_casefold_whitespace(raw, expected):
    assert normalize(raw) == expected


def _general_path(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def test_ascii_fast_path_equals_the_general_path():
    rng = np.random.default_rng(7)
    texts = ["".join(map(chr, rng.integers(0, 128, size=int(n))))
             for n in rng.integers(0, 60, size=2000)]
    texts += [chr(c) * 3 for c in range(128)] + list(stdlib_paragraphs()[:50])
    for text in texts:
        assert text.isascii()
        assert normalize(text) == _general_path(text), repr(text)


def test_non_ascii_takes_the_general_path():
    for para in stdlib_paragraphs()[:20]:
        mixed = para.replace(" ", "\u00a0", 3) + " Ｅｎｄ"
        assert normalize(mixed) == _general_path(mixed)
        assert normalize(mixed) == normalize(para + " end")


# --------------------------------------------------------------------------- shingles, Jaccard


def test_exact_jaccard_equals_python_set_arithmetic_on_random_sets():
    rng = np.random.default_rng(11)
    universe = rng.integers(0, 2**64, size=400, dtype=np.uint64)
    cases = [(np.array([], np.uint64), np.array([], np.uint64)),
             (universe[:10], np.array([], np.uint64)),
             (universe[:50], universe[:50]),
             (universe[:50], universe[50:100])]
    for _ in range(300):
        a = rng.choice(universe, size=int(rng.integers(0, 200)), replace=False)
        b = rng.choice(universe, size=int(rng.integers(0, 200)), replace=False)
        cases.append((a, b))
    for a, b in cases:
        x, y = np.unique(a), np.unique(b)
        expected = set_jaccard(set(x.tolist()), set(y.tolist()))
        assert exact_jaccard(x, y) == pytest.approx(expected, abs=1e-12)
        assert exact_jaccard(y, x) == pytest.approx(expected, abs=1e-12)


def _polynomial_hashes(cps: list[int], k: int, seed: int) -> list[int]:
    """The module docstring's shingle hash, in Python integers."""
    mask = (1 << 64) - 1
    k = min(k, len(cps))
    out = []
    for j in range(len(cps) - k + 1):
        h = seed
        for c in cps[j:j + k]:
            h = ((h ^ c) * 0x100000001B3) & mask
        for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
            h = ((h ^ (h >> 33)) * mult) & mask
        out.append(h ^ (h >> 33))
    return out


@pytest.mark.parametrize("k", list(range(1, 33)))
def test_shingle_hashes_are_the_polynomial_for_every_shingle_size(k):
    rng = np.random.default_rng(k)
    seed = MinHasher(1, 7, k).shingle_seed
    for n in (1, k - 1, k, k + 1, 3 * k + 5, 200):
        if n < 1:
            continue
        cps = rng.integers(0, 0x110000, size=n + 6).astype(np.uint32)
        out = np.zeros(n + 6, dtype=np.uint64)
        m = shingle_hashes(cps, 3, 3 + n, k, seed, out)  # a slice inside a larger buffer
        expected = _polynomial_hashes(cps[3:3 + n].tolist(), k, int(seed))
        assert m == len(expected)
        assert out[:m].tolist() == expected
        assert not out[m:].any()


def test_hashed_shingle_sets_match_string_shingles_on_prose():
    """One hashed shingle per distinct 5-gram (no collisions), hence the same Jaccard."""
    hasher = MinHasher(NUM_PERM, 1, K)
    pairs = varied_pairs()
    for a, b in pairs:
        sa, sb = hasher.shingle_sets([a, b])
        assert np.all(sa[1:] > sa[:-1]) and np.all(sb[1:] > sb[:-1])  # sorted, unique
        ga, gb = string_shingles(a), string_shingles(b)
        assert (len(sa), len(sb)) == (len(ga), len(gb))
        assert exact_jaccard(sa, sb) == pytest.approx(set_jaccard(ga, gb), abs=1e-12)
    jaccards = [set_jaccard(string_shingles(a), string_shingles(b)) for a, b in pairs]
    assert min(jaccards) < 0.3 and max(jaccards) > 0.97  # the pairs really vary


def test_short_texts_are_one_shingle_and_sizes_match_sets():
    hasher = MinHasher(NUM_PERM, 1, K)
    texts = ["abc", "abcd", "abcde", "abcdef", "aaaaaaaa", "x"]
    sets = hasher.shingle_sets(texts)
    assert [len(s) for s in sets] == [len(string_shingles(t)) for t in texts] == [1, 1, 1, 2, 1, 1]
    _, sizes = hasher.signatures_and_sizes(texts)
    assert sizes.tolist() == [len(s) for s in sets]
    assert exact_jaccard(*hasher.shingle_sets(["abc", "abc"])) == 1.0


def _pairs_of(texts: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs over ``texts``: chains, stars and random pairs (components of every size), both
    orientations, and a text paired with itself."""
    rng = np.random.default_rng(seed)
    n = len(texts)
    left = [i for i in range(0, n - 1, 3)] + [0] * 8 + rng.integers(0, n, 300).tolist() + [5]
    right = [i + 1 for i in range(0, n - 1, 3)] + list(range(1, 9)) + \
        rng.integers(0, n, 300).tolist() + [5]
    return np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)


def test_pair_jaccards_are_exact_jaccard_of_the_shingle_sets():
    """The scan's kernel (no sorted sets, UTF-8 in, hash tables) gives the very floats of
    `exact_jaccard` over `MinHasher.shingle_sets`, for prose, its edits, non-ASCII text
    (two- to four-byte UTF-8), text shorter than a shingle, empty text and repeats."""
    hasher = MinHasher(NUM_PERM, 1, K)
    texts = [t for pair in varied_pairs() for t in pair]
    texts += ["", "", "a", "abcd", "aaaaaaaaaaaa", "ééééé", "日本語のテキスト日本語",
              "emoji 😀😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 text", texts[0].replace("e", "é"), texts[1] + " ∑"]
    left, right = _pairs_of(texts, 3)
    got, bad = pair_jaccards(*utf8_batch([t.encode() for t in texts]), left, right, K,
                             hasher.shingle_seed)
    assert bad == -1
    sets = hasher.shingle_sets(texts)
    expected = [exact_jaccard(sets[a], sets[b]) for a, b in zip(left.tolist(), right.tolist(), strict=True)]
    assert got.tolist() == expected
    assert 0.0 in expected and 1.0 in expected and any(0.3 < j < 0.99 for j in expected)


def test_pair_jaccards_reject_what_python_does_not_decode():
    """A text is valid exactly when Python's strict UTF-8 decoder accepts it: overlong forms,
    surrogates, code points over U+10FFFF, stray continuation bytes and truncated sequences
    are reported (the first such text), valid text decodes to the same code points."""
    hasher = MinHasher(NUM_PERM, 1, K)
    rng = np.random.default_rng(7)
    cases = [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80",
             b"\xf0\x80\x80\x80", b"abc\xe2\x82", b"\x80", b"\xff", b"\xf5\x80\x80\x80",
             b"\xc2\xa0", b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xed\x9f\xbf"]
    cases += [rng.integers(0, 256, int(rng.integers(1, 7)), dtype=np.uint8).tobytes()
              for _ in range(3000)]
    for case in cases:
        text = b"valid prefix text " + case + b" and a valid tail"
        try:
            decoded: str | None = text.decode()
        except UnicodeDecodeError:
            decoded = None
        got, bad = pair_jaccards(*utf8_batch([b"another text", text]), np.array([0]),
                                 np.array([1]), K, hasher.shingle_seed)
        assert bad == (-1 if decoded is not None else 1), case
        if decoded is not None:
            sets = hasher.shingle_sets(["another text", decoded])
            assert got.tolist() == [exact_jaccard(*sets)], case


# --------------------------------------------------------------------------- signatures


def _datasketch(text: str) -> MinHash:
    m = MinHash(num_perm=NUM_PERM, seed=1)
    m.update_batch([s.encode("utf-8") for s in sorted(string_shingles(text))])
    return m


def test_estimates_agree_with_datasketch_within_standard_errors():
    """Ours and datasketch's MinHash(128) both estimate the exact Jaccard of the same 5-gram
    sets within 4 standard errors (plus one permutation's step), with similar mean error."""
    hasher = MinHasher(NUM_PERM, 1, K)
    ours_err, theirs_err = [], []
    for a, b in varied_pairs():
        exact = set_jaccard(string_shingles(a), string_shingles(b))
        sig = hasher.signatures([a, b])
        ours = float(np.mean(sig[0] == sig[1]))
        theirs = _datasketch(a).jaccard(_datasketch(b))
        bound = 4 * math.sqrt(exact * (1 - exact) / NUM_PERM) + 1 / NUM_PERM
        assert abs(ours - exact) <= bound, (exact, ours)
        assert abs(theirs - exact) <= bound, (exact, theirs)
        ours_err.append(ours - exact)
        theirs_err.append(theirs - exact)
    ours_mae = float(np.mean(np.abs(ours_err)))
    theirs_mae = float(np.mean(np.abs(theirs_err)))
    assert ours_mae <= 1.5 * theirs_mae, (ours_mae, theirs_mae)
    assert abs(float(np.mean(ours_err))) < 0.02  # no systematic bias


def test_signature_of_a_text_does_not_depend_on_its_batch():
    """An all-ASCII batch is hashed from bytes, a mixed one from UTF-32: same signatures."""
    hasher = MinHasher(NUM_PERM, 1, K)
    ascii_texts = [normalize(p) for p in stdlib_paragraphs()[:5]]
    alone = np.stack([hasher.signature(t) for t in ascii_texts])
    together, sizes = hasher.signatures_and_sizes(ascii_texts)
    mixed, mixed_sizes = hasher.signatures_and_sizes([*ascii_texts, "été à paris, 5 km"])
    assert np.array_equal(alone, together)
    assert np.array_equal(together, mixed[:5])
    assert np.array_equal(sizes, mixed_sizes[:5])
    assert together.dtype == np.uint32 and together.shape == (5, NUM_PERM)


def test_seed_and_shingle_size_change_signatures():
    text = normalize(stdlib_paragraphs()[0])
    base = MinHasher(NUM_PERM, 1, K).signature(text)
    assert not np.array_equal(base, MinHasher(NUM_PERM, 2, K).signature(text))
    assert not np.array_equal(base, MinHasher(NUM_PERM, 1, 4).signature(text))
    assert np.array_equal(base, MinHasher(NUM_PERM, 1, K).signature(text))


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[2])
from test_signature import _digest
print(_digest(json.load(open(sys.argv[1], encoding="utf-8"))))
"""


def _digest(texts: list[str]) -> str:
    hasher = MinHasher(NUM_PERM, 1, K)
    sigs, sizes = hasher.signatures_and_sizes(texts)
    h = hashlib.sha256(sigs.tobytes())
    h.update(sizes.tobytes())
    h.update(band_keys(stored_values(sigs), 16, 8).tobytes())
    for s in hasher.shingle_sets(texts):
        h.update(s.tobytes())
    return h.hexdigest()


def test_signatures_are_identical_across_processes(tmp_path):
    texts = [normalize(p) for p in stdlib_paragraphs()[:40]] + ["été 5 km", "ab"]
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(texts), encoding="utf-8")
    children = []
    for hash_seed in ("1", "2"):  # str hashing randomization must not matter
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": hash_seed}
        children.append(subprocess.Popen([sys.executable, "-c", _CHILD, str(path),
                                          str(Path(__file__).parent)], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True))
    digests = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        digests.append(out.strip())
    assert digests[0] == digests[1] == _digest(texts)


def test_signatures_are_pinned_to_the_algorithm_version():
    """Stored signatures bind an index to ALGORITHM_VERSION: if hashing, permutations or banding
    change, this digest changes and the version must be bumped (then re-pin the digest)."""
    texts = ["the quick brown fox jumps over the lazy dog", "été à paris: 5 km, 12 %",
             "abc", normalize("Return the comparison form of TEXT.  Pure-ASCII text takes a "
                              "fast path with the same result.")]
    assert (ALGORITHM_VERSION, _digest(texts)) == (
        "nd-3", "6612b4ec1067ff03f4d142d0ad04a03cad2da87a0c893bc415491a0c26f7c57b")


# --------------------------------------------------------------------------- LSH band keys


def test_band_keys_shape_range_and_determinism():
    hasher = MinHasher(NUM_PERM, 1, K)
    sigs = hasher.signatures([normalize(p) for p in stdlib_paragraphs()[:30]])
    keys = band_keys(sigs, 16, 8)
    assert keys.shape == (30, 16) and keys.dtype == np.int64
    assert np.all(keys >= 0)
    assert np.array_equal(keys, band_keys(sigs.copy(), 16, 8))
    assert len(np.unique(keys)) == keys.size  # different texts, different bands
    assert band_keys(sigs, 14, 9).shape == (30, 14)  # only bands × rows positions are used
    assert np.array_equal(band_keys(sigs[:, :120], 15, 8), band_keys(sigs, 15, 8))


@pytest.mark.parametrize("bands, rows", [(16, 8), (14, 9), (20, 5)])
def test_compiled_band_keys_equal_band_keys(bands, rows):
    """The scan's compiled `band_keys_into` gives `band_keys`, for stored 16-bit values and
    full 32-bit minima."""
    rng = np.random.default_rng(bands)
    stored = rng.integers(0, 2**16, size=(500, NUM_PERM), dtype=np.uint64).astype(np.uint16)
    full = rng.integers(0, 2**32, size=(500, NUM_PERM), dtype=np.uint64).astype(np.uint32)
    for sigs in (stored, full):
        out = np.empty((len(sigs), bands), dtype=np.int64)
        band_keys_into(sigs, bands, rows, out)
        assert np.array_equal(out, band_keys(sigs, bands, rows))


def test_band_keys_follow_their_band_only():
    rng = np.random.default_rng(5)
    sig = rng.integers(0, 2**32, size=(1, NUM_PERM), dtype=np.uint64).astype(np.uint32)
    keys = band_keys(sig, 16, 8)[0]
    for band in (0, 7, 15):
        changed = sig.copy()
        changed[0, band * 8 + 3] ^= np.uint32(1)
        other = band_keys(changed, 16, 8)[0]
        assert other[band] != keys[band]
        assert np.array_equal(np.delete(other, band), np.delete(keys, band))
    same_values = np.tile(sig[:, :8], (1, 16))  # every band holds the same rows
    assert len(set(band_keys(same_values, 16, 8)[0].tolist())) == 16  # band number is mixed in


def test_near_duplicates_share_a_band_and_unrelated_texts_do_not():
    hasher = MinHasher(NUM_PERM, 1, K)
    close = [(a, b) for a, b in varied_pairs()
             if set_jaccard(string_shingles(a), string_shingles(b)) >= 0.9]
    assert len(close) >= 5
    for a, b in close:
        ka, kb = band_keys(hasher.signatures([a, b]), 16, 8)
        assert set(ka.tolist()) & set(kb.tolist())
    unrelated = [normalize(p) for p in stdlib_paragraphs()[100:140]]
    keys = band_keys(hasher.signatures(unrelated), 16, 8)
    assert len(np.unique(keys)) == keys.size


# --------------------------------------------------------------------------- index workers


def _index_dump(path: Path) -> dict[str, list]:
    """contents, bands and sources keyed by content_id (not row ids), sorted."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        contents = sorted(con.execute(
            "SELECT c.content_id, s.scope_key, c.batch, c.norm_chars, c.shingles, c.signature, "
            "c.text_z FROM contents c JOIN scopes s ON s.id = c.scope"))
        bands = sorted(con.execute(
            "SELECT b.key, c.content_id FROM bands b JOIN contents c ON c.id = b.content"))
        sources = sorted(con.execute(
            "SELECT p.package_id, s.sample_id, s.split, s.file, s.line, s.position, "
            "c.content_id, s.text_sha256, s.domain, s.source FROM sources s "
            "JOIN contents c ON c.id = s.content JOIN packages p ON p.id = s.package"))
    finally:
        con.close()
    return {"contents": contents, "bands": bands, "sources": sources}


def test_workers_1_and_2_build_identical_index_contents(tmp_path, monkeypatch):
    """Small chunks so that two workers really interleave; the rows must not notice."""
    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 16)
    paragraphs = stdlib_paragraphs()
    train = [{"id": f"s{i}", "text": p, "domain": "docs"} for i, p in enumerate(paragraphs[:160])]
    train += [{"id": f"e{i}", "text": reverse_every(p, 9), "domain": "docs"}
              for i, p in enumerate(paragraphs[:40])]
    train += [{"id": f"d{i}", "text": p} for i, p in enumerate(paragraphs[:10])]  # exact copies
    train += [{"id": "short", "text": "too short for a signature"}]
    pkg = make_package(tmp_path, "cpt-w", {"train": train,
                                           "validation": [{"id": "v0", "text": paragraphs[200]}]})
    dumps = []
    for workers in (1, 2):
        index = tmp_path / f"w{workers}.sqlite"
        code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", pkg,
                                 "--workers", workers)
        assert code == 0, err
        assert "212 records, 202 new texts" in out
        dumps.append(_index_dump(index))
    assert dumps[0] == dumps[1]
    contents = dumps[0]["contents"]
    assert len(contents) == 202
    config = NearDedupConfig()
    with_sig = [row for row in contents if row[5] is not None]
    assert len(with_sig) == 201 and all(len(row[5]) == 2 * config.num_perm for row in with_sig)
    assert len(dumps[0]["bands"]) == 201 * config.bands
