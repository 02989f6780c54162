"""A takedown act as the index records it (docs/takedowns.md): one strict model per act,
stored as canonical JSON in one ``meta`` row of the index per act, keyed
``takedown/NNNNNN`` (`KEY_PREFIX`, the act's sequence number), so that every backend keeps
the log in the table every backend has, appended inside the writer's transaction.

An ``add`` act carries the taken-down texts' fingerprints (`TakedownItem`): the sha256 of
the normalized compared text, its length, and, for a text of at least ``min_chars``
characters, its 16-bit MinHash signature (what the index stores and bands) and its hashed
shingle set (what exact Jaccard is computed on), both under the index's config. The text
itself only with ``keep_text``. A ``lift`` act names the request it lifts; nothing is ever
removed or rewritten.
"""

from __future__ import annotations

import base64
import zlib
from typing import Literal

import numpy as np
import orjson
from pydantic import Field

from near_dedup_core.formats import StrictModel

#: The ``meta`` key of act ``seq``: ``takedown/000001``, …
KEY_PREFIX = "takedown/"
HEX64 = r"^[0-9a-f]{64}$"


def act_key(seq: int) -> str:
    return f"{KEY_PREFIX}{seq:06d}"


class TakedownItem(StrictModel):
    """One taken-down text: ``id`` names it within its request (the line's id of
    ``--jsonl``, ``PACKAGE/SAMPLE`` of ``--sample``, the file name of ``--text``)."""

    id: str = Field(min_length=1)
    text_sha256: str = Field(pattern=HEX64)  # of the normalized compared text
    chars: int = Field(ge=0)  # characters of the normalized compared text
    signature: str | None  # base64 of num_perm little-endian uint16 (None: under min_chars)
    shingles: str | None  # base64 of zlib of sorted little-endian uint64 (None: likewise)
    text: str | None  # the compared text as given, only when asked to keep it

    @property
    def text_id(self) -> str:
        """The 32 hex digits a report names the taken-down text by (``match.content_id``
        of a takedown relation): the first half of ``text_sha256``."""
        return self.text_sha256[:32]

    def signature_values(self) -> np.ndarray:
        assert self.signature is not None
        return np.frombuffer(base64.b64decode(self.signature), dtype="<u2").astype(np.uint16)

    def shingle_set(self) -> np.ndarray:
        assert self.shingles is not None
        raw = zlib.decompress(base64.b64decode(self.shingles))
        return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


def encode_signature(values: np.ndarray) -> str:
    return base64.b64encode(np.asarray(values, dtype="<u2").tobytes()).decode()


def encode_shingles(values: np.ndarray) -> str:
    raw = np.asarray(values, dtype="<u8").tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode()


class TakedownAct(StrictModel):
    """One recorded act: ``add`` (with its items) or ``lift`` (of an earlier add's request,
    no items)."""

    seq: int = Field(ge=1)
    action: Literal["add", "lift"]
    request_id: str = Field(min_length=1)
    at: str  # UTC, ISO 8601
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    items: list[TakedownItem]

    def to_json(self) -> str:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS).decode()
