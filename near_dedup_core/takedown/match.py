"""What a scan does with the takedowns in force (docs/takedowns.md): every content of the
pool that is a taken-down text or a near copy of it, in every split and scope.

Candidates come from the same LSH bands as the scan's own (the stored 16-bit signatures,
``bands`` × ``rows``), and each candidate is verified by exact Jaccard of the hashed shingle
sets at or above the threshold, the scan's formula on the same sets: a near copy that the
scan would relate to the taken-down text, had it been in the pool, is found. Texts under
``min_chars`` have no signature and match exactly only (the sha256 of the normalized text),
as in a scan. The numeric/unit guard is not applied: a takedown removes a copy whose numbers
differ too.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import NamedTuple, Protocol

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.formats.takedown import TakedownAct, TakedownItem
from near_dedup_core.signature import MinHasher, band_keys, band_keys_into, exact_jaccard
from near_dedup_core.takedown.record import acts_of, in_force

#: Pool contents whose band keys are computed per call (a block of their signatures).
KEY_BLOCK = 1 << 16
#: Candidate contents whose texts are read and hashed per call (their texts and shingle sets
#: are held together: some 30 KiB per text of the bench's pools).
TEXT_BLOCK = 512


class TakedownHits(NamedTuple):
    """The takedowns in force when the scan read the index (``acts``, recorded order) and
    every pool content they take down, one row per (content, taken-down text), sorted by
    content, then act, then text: ``content`` indexes `Pool.contents`, ``act`` ``acts``,
    ``item`` the act's items; ``exact``: the same normalized text."""

    acts: list[TakedownAct]  # their items without their fingerprints (`_without_fingerprints`)
    content: np.ndarray  # int64
    act: np.ndarray  # int64
    item: np.ndarray  # int64
    jaccard: np.ndarray  # float64
    exact: np.ndarray  # bool

    def item_of(self, row: int) -> TakedownItem:
        return self.acts[int(self.act[row])].items[int(self.item[row])]


def takedowns_in_force(snap: db.Snapshot) -> list[TakedownAct]:
    """The adds not lifted, as the scan's snapshot holds them."""
    return in_force(acts_of(snap.meta(), str(snap.path)))


def find_takedowns(snap: db.Snapshot, contents: db.ContentColumns, config: NearDedupConfig,
                   acts: list[TakedownAct] | None = None) -> TakedownHits | None:
    """The pool contents (``contents``, as `Pool.contents`) that the takedowns in force take
    down; None when no takedown is in force (the scan is then exactly as without them)."""
    if acts is None:
        acts = takedowns_in_force(snap)
    if not acts:
        return None
    items = [(a, i, item) for a, act in enumerate(acts) for i, item in enumerate(act.items)]
    found: dict[tuple[int, int, int], tuple[float, bool]] = {}
    long_items = [x for x in items if x[2].signature is not None]
    short_items = [x for x in items if x[2].signature is None]
    if long_items:
        _near_copies(snap, contents, config, long_items, found)
    if short_items:
        _exact_copies(snap, contents, short_items, found)
    rows = sorted(found)
    return TakedownHits(
        acts=[_without_fingerprints(a) for a in acts],
        content=np.asarray([r[0] for r in rows], dtype=np.int64),
        act=np.asarray([r[1] for r in rows], dtype=np.int64),
        item=np.asarray([r[2] for r in rows], dtype=np.int64),
        jaccard=np.asarray([found[r][0] for r in rows], dtype=np.float64),
        exact=np.asarray([found[r][1] for r in rows], dtype=bool))


def _without_fingerprints(act: TakedownAct) -> TakedownAct:
    """``act`` as the scan keeps it once the pool is matched, until its report is written:
    its items' ids and hashes, without their signatures, shingle sets and texts (of 1,000
    acts of one text of the bench's pools, 24 MiB of base64 strings)."""
    return act.model_copy(update={"items": [
        item.model_copy(update={"signature": None, "shingles": None, "text": None})
        for item in act.items]})


class _Texts(Protocol):
    def texts(self, ids: list[int]) -> dict[int, str]: ...


def _near_copies(snap: _Texts, contents: db.ContentColumns, config: NearDedupConfig,
                 items: list[tuple[int, int, TakedownItem]],
                 found: dict[tuple[int, int, int], tuple[float, bool]]) -> None:
    """Pool contents with a signature sharing a band key with a taken-down text, verified
    by exact Jaccard."""
    sigs = np.stack([x[2].signature_values() for x in items])
    if sigs.shape[1] != config.num_perm:
        raise ValueError("a takedown's signature does not have num_perm values")
    item_keys = band_keys(sigs, config.bands, config.rows)
    by_key: dict[int, list[int]] = defaultdict(list)
    for row, key in zip(np.repeat(np.arange(len(items)), config.bands).tolist(),
                        item_keys.reshape(-1).tolist(), strict=True):
        by_key[key].append(row)
    wanted = np.sort(np.fromiter(by_key, dtype=np.int64, count=len(by_key)))
    signed = np.flatnonzero(contents.has_signature)
    pairs: set[tuple[int, int]] = set()
    keys = np.empty((min(KEY_BLOCK, len(signed)), config.bands), dtype=np.int64)
    for lo in range(0, len(signed), KEY_BLOCK):
        part = signed[lo:lo + KEY_BLOCK]
        out = keys[:len(part)]
        band_keys_into(contents.signatures[part], config.bands, config.rows, out)
        # a lookup in the sorted keys: `np.isin` sorts the block with them (47 MiB at once)
        at = np.searchsorted(wanted, out)
        np.minimum(at, len(wanted) - 1, out=at)
        hit_rows, hit_bands = np.nonzero(wanted[at] == out)
        del at
        for r, b in zip(hit_rows.tolist(), hit_bands.tolist(), strict=True):
            for row in by_key[int(out[r, b])]:
                pairs.add((int(part[r]), row))
    if not pairs:
        return
    hasher = MinHasher(1, config.seed, config.shingle_size)
    item_sets: dict[int, np.ndarray] = {}  # decoded as a candidate needs it
    candidates = sorted({c for c, _ in pairs})
    of_content: dict[int, list[int]] = defaultdict(list)
    for c, row in pairs:
        of_content[c].append(row)
    for lo in range(0, len(candidates), TEXT_BLOCK):
        block = candidates[lo:lo + TEXT_BLOCK]
        texts = snap.texts([int(contents.rowid[c]) for c in block])
        norms = [texts[int(contents.rowid[c])] for c in block]
        for c, norm, shingles in zip(block, norms, hasher.shingle_sets(norms), strict=True):
            digest = hashlib.sha256(norm.encode()).hexdigest()
            for row in sorted(of_content[c]):
                a, i, item = items[row]
                if row not in item_sets:
                    item_sets[row] = item.shingle_set()
                j = exact_jaccard(item_sets[row], shingles)
                if j >= config.threshold:
                    found[(c, a, i)] = (j, digest == item.text_sha256)


def _exact_copies(snap: db.Snapshot, contents: db.ContentColumns,
                  items: list[tuple[int, int, TakedownItem]],
                  found: dict[tuple[int, int, int], tuple[float, bool]]) -> None:
    """Pool contents without a signature (under ``min_chars``) whose normalized text is a
    taken-down text's."""
    by_digest: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for a, i, item in items:
        by_digest[item.text_sha256].append((a, i))
    unsigned = np.flatnonzero(~contents.has_signature).tolist()
    for lo in range(0, len(unsigned), TEXT_BLOCK):
        block = unsigned[lo:lo + TEXT_BLOCK]
        texts = snap.texts([int(contents.rowid[c]) for c in block])
        for c in block:
            digest = hashlib.sha256(texts[int(contents.rowid[c])].encode()).hexdigest()
            for a, i in by_digest.get(digest, ()):
                found[(c, a, i)] = (1.0, True)


class NodeTakedowns(NamedTuple):
    """`TakedownHits` per node of the pool: ``down[i]`` whether node i is taken down, with
    its first hit's Jaccard (``jaccard``) and its hits as rows ``start[i]:end[i]``."""

    down: np.ndarray  # bool
    jaccard: np.ndarray  # float64
    start: np.ndarray  # int64
    end: np.ndarray  # int64


def per_node(hits: TakedownHits, node_content: np.ndarray) -> NodeTakedowns:
    """Each node's hits (a node is one content within one split: all of its samples are taken
    down together)."""
    start = np.searchsorted(hits.content, node_content, side="left")
    end = np.searchsorted(hits.content, node_content, side="right")
    down = end > start
    jaccard = np.zeros(len(node_content), dtype=np.float64)
    jaccard[down] = hits.jaccard[start[down]]
    return NodeTakedowns(down, jaccard, start.astype(np.int64), end.astype(np.int64))


def applied(hits: TakedownHits, samples_down: dict[int, int]) -> list[dict]:
    """The manifest's ``takedowns``: each takedown in force when the report was frozen, with
    the pool samples it took down (``samples_down``: act -> samples)."""
    return [{"request_id": act.request_id, "act": act.seq, "texts": len(act.items),
             "samples": samples_down.get(a, 0)} for a, act in enumerate(hits.acts)]


class TextHit(NamedTuple):
    """A text (by its index in the texts given) that a takedown in force takes down."""

    text: int
    request_id: str
    item: str
    jaccard: float


def texts_taken_down(texts: list[str], acts: list[TakedownAct],
                     config: NearDedupConfig) -> list[TextHit]:
    """Which of these compared texts (as a record holds them; normalized here) the takedowns
    ``acts`` take down, by the rule of a scan (LSH bands, then exact Jaccard; exact only
    under ``min_chars``): what `find_takedowns` finds in a pool, for texts outside an index
    (a mixture's records). Sorted by text, then act, then item."""
    from near_dedup_core.normalize import normalize_many
    from near_dedup_core.signature import stored_values

    items = [(a, i, item) for a, act in enumerate(acts) for i, item in enumerate(act.items)]
    if not items or not texts:
        return []
    norms = normalize_many(list(texts))
    hasher = MinHasher(config.num_perm, config.seed, config.shingle_size)
    long_rows = [k for k, t in enumerate(norms) if len(t) >= config.min_chars]
    signatures = np.zeros((len(norms), config.num_perm), dtype=np.uint16)
    if long_rows:
        signatures[long_rows] = stored_values(hasher.signatures([norms[k] for k in long_rows]))
    has = np.zeros(len(norms), dtype=bool)
    has[long_rows] = True
    digests = [hashlib.sha256(t.encode()).hexdigest() for t in norms]
    found: dict[tuple[int, int, int], tuple[float, bool]] = {}
    columns = _TextColumns(norms, signatures, has)
    long_items = [x for x in items if x[2].signature is not None]
    if long_items:
        _near_copies(columns, columns.contents, config, long_items, found)
    for k, digest in enumerate(digests):
        if not has[k]:
            for a, i, item in items:
                if item.signature is None and item.text_sha256 == digest:
                    found[(k, a, i)] = (1.0, True)
    return [TextHit(k, acts[a].request_id, acts[a].items[i].id, found[(k, a, i)][0])
            for k, a, i in sorted(found)]


class _TextColumns:
    """Plain texts as `_near_copies` reads a pool: ``contents`` (row ids are the texts'
    indexes) and ``texts`` (the normalized texts by row id)."""

    def __init__(self, norms: list[str], signatures: np.ndarray, has: np.ndarray) -> None:
        self.norms = norms
        n = len(norms)
        self.contents = db.ContentColumns(
            rowid=np.arange(n, dtype=np.int64), content_id=[b""] * n,
            scope=np.zeros(n, dtype=np.int64), batch=np.zeros(n, dtype=np.int64),
            shingles=np.zeros(n, dtype=np.int64), signatures=signatures, has_signature=has,
            norm_chars=np.fromiter(map(len, norms), dtype=np.int64, count=n))

    def texts(self, ids: list[int]) -> dict[int, str]:
        return {i: self.norms[i] for i in ids}
