"""The signing task of `index find`: a batch of query texts normalized and signed as `index`
signs a package's new contents (`normalize.normalize_spans`, then `ingest.work.sign`: the
code points the normalization made are hashed without converting the strings back), on the
executor's workers, whose forkserver has the kernels and the normalization table loaded
(`history.verify.WORKER_MODULES`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from near_dedup_core.ingest.work import sign
from near_dedup_core.normalize import normalize_spans
from near_dedup_core.params import WorkerParams


class SignedTexts(NamedTuple):
    """Per text of a batch: its normalized text as UTF-8 and its length in code points, its
    stored signature, shingle-set size and band keys (a text shorter than ``min_chars`` has
    a signature of zeros, size 0, and the band keys of that)."""

    utf8: list[bytes]
    chars: np.ndarray  # int64
    sigs: np.ndarray  # (n, num_perm) uint16
    sizes: np.ndarray  # int64
    keys: np.ndarray  # (n, bands) int64


def sign_texts(params: WorkerParams, texts: list[str], normalized: bool) -> SignedTexts:
    """``texts`` signed; normalized first unless they are (``normalized``: an indexed
    content's text, which a hash query names)."""
    norm, parts = (texts, []) if normalized else normalize_spans(texts)
    utf8 = [t.encode() for t in norm]
    sigs, sizes, keys, _ = sign(params, norm, utf8, parts, None, compress=False)
    chars = np.fromiter(map(len, norm), dtype=np.int64, count=len(norm))
    return SignedTexts(utf8, chars, sigs, sizes, keys)
