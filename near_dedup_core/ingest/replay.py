"""A worker's result kept for a rerun (`index_store.WorkFiles`): a killed batch run again with
the same inputs takes the results its first try kept instead of working those blocks again,
and re-derives everything else (row ids, "seen before", the rows) exactly as the first try
did (docs/iceberg.md, "A killed day resumes").

- `inputs_digest`: what the kept results are valid for besides the index's state (the
  packages by id and manifest sha256, which of them are new, the config, the tool version);
- `job_name`: one block's job (its place in the batch, its lines, the dictionary its texts
  are compressed with, what the worker was asked to do);
- `encode` / `decode`: a `work.BlockResult` as bytes, NumPy's ``.npz`` without pickles and
  one JSON member, so that reading a kept result never runs code. A result that carries a
  problem is never kept (the batch fails on it)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from near_dedup_core import __version__
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.ingest.work import BlockJob, BlockResult, NewContents
from near_dedup_core.package import Package

#: Bumped when the encoding or the meaning of a kept result changes.
FORMAT = "1"


def inputs_digest(pkgs: Sequence[Package], new: set[str], config: NearDedupConfig) -> str:
    h = hashlib.sha256(f"near-dedup work {FORMAT} {__version__}\n".encode())
    h.update(config.canonical_json().encode())
    for p in pkgs:
        h.update(orjson.dumps([p.package_id, p.manifest_sha256, p.package_id in new]))
    return h.hexdigest()


def job_name(ordinal: int, job: BlockJob) -> str:
    b = job.block
    h = hashlib.sha256(orjson.dumps([b.package_id, b.file, b.first_line, b.first_position,
                                     b.line_count, job.train, job.use_trained,
                                     job.validate_only, job.compress,
                                     job.known_texts is not None]))
    h.update(hashlib.sha256(job.dictionary or b"").digest())
    return f"{ordinal:07d}-{h.hexdigest()[:24]}"


def _joined(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum([len(x) for x in items], dtype=np.int64)
    return np.frombuffer(b"".join(items), np.uint8), ends


def _split(data: np.ndarray, ends: np.ndarray) -> list[bytes]:
    raw = data.tobytes()
    stops = ends.tolist()
    return [raw[s:e] for s, e in zip([0, *stops[:-1]], stops, strict=True)] if stops else []


def encode(res: BlockResult) -> bytes:
    assert res.problem is None
    head = {"sample_ids": res.sample_ids, "refs": [[k, a, b] for k, (a, b) in res.refs.items()],
            "domains": res.domains, "sources": res.sources, "scope_of": res.scope_of,
            "known": [int(x) for x in res.known], "new_of": res.new_of, "scopes": res.scopes,
            "sha_none": [i for i, s in enumerate(res.shas) if s is None],
            "new_scopes": None if res.new is None else res.new.scopes,
            "dictionary": res.dictionary is not None}
    arrays: dict[str, Any] = {"head": np.frombuffer(orjson.dumps(head), np.uint8)}
    arrays["shas"], arrays["sha_ends"] = _joined([s or b"" for s in res.shas])
    if res.dictionary is not None:
        arrays["dictionary"] = np.frombuffer(res.dictionary, np.uint8)
    new = res.new
    if new is not None:
        arrays["content_ids"], arrays["content_id_ends"] = _joined(new.content_ids)
        arrays["blobs"], arrays["blob_ends"] = _joined(new.blobs)
        arrays.update(norm_chars=new.norm_chars, sizes=new.sizes, sigs=new.sigs, keys=new.keys)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def decode(data: bytes) -> BlockResult:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        head = orjson.loads(z["head"].tobytes())
        shas: list[bytes | None] = list(_split(z["shas"], z["sha_ends"]))
        for i in head["sha_none"]:
            shas[i] = None
        new = None
        if head["new_scopes"] is not None:
            new = NewContents(_split(z["content_ids"], z["content_id_ends"]),
                              head["new_scopes"], z["norm_chars"], z["sizes"], z["sigs"],
                              z["keys"], _split(z["blobs"], z["blob_ends"]))
        dictionary = z["dictionary"].tobytes() if head["dictionary"] else None
    return BlockResult(head["sample_ids"], {k: (a, b) for k, a, b in head["refs"]},
                       head["domains"], head["sources"], shas, head["scope_of"], head["known"],
                       head["new_of"], [(s[0], s[1]) for s in head["scopes"]],
                       new, dictionary, None)
