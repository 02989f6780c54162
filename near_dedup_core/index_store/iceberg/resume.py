"""The work files of a batch (`IcebergWorkFiles`, a `protocols.WorkFiles`): what the
batch's worker tasks returned, block by block, kept beside the tables so that a run of the
same batch killed before its commit (SIGKILL, a lost node) is resumed from them rather than
started over (docs/iceberg.md, "A killed day resumes").

They live under ``<namespace folder>/_resume/<state>-<key>/`` of the warehouse, outside
every table's folder: no table's metadata ever names them, so no scan and no `index check`
reads them. The folder's name says what they are valid for:

- ``<state>``: the published state the batch runs on (the ``commits`` row count and the
  commit table's snapshot id). A worker's result depends on it (which raw texts the index
  already knows), so a batch on another state never reuses them;
- ``<key>``: the batch's inputs (each package's id and manifest sha256, which of them are
  new), the config and the tool version (`ingest.replay.inputs_digest`): another input or
  another config is another folder.

Each file is named by its job (the block's place and the dictionary it was compressed
with, `ingest.replay.job_name`) and ends with the sha256 of its bytes: a file cut short
by the kill, or altered, does not read back and its block is worked again.

Every `CHECKPOINT_BLOCKS` blocks the writer also keeps a **checkpoint** there
(`IcebergWorkFiles.checkpoint`): its data files so far closed (the ``contents``,
``sources`` and ``content_keys`` files, the band files of its finished tasks; written under
the tables' folders as every batch file is, and named by no snapshot until the commit) and
the writer's state after those blocks, with the batch's raw-text rows and new dictionaries.
A rerun takes over the newest checkpoint whose files are all there (`restore`) and reads the
blocks before it only to check their bytes.

A batch that commits removes its folder and those of every earlier state (no batch can run
on those any more); a batch that fails (bad input, a lost commit) removes its own. A killed
batch's folder stays until the same batch runs again, or until a later batch commits."""

from __future__ import annotations

import hashlib
import io
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson
from pyiceberg.io import FileIO
from pyiceberg.table import Table

from near_dedup_core.index_store.iceberg import datafiles
from near_dedup_core.index_store.iceberg.snapshot import Pinned


class Checkpointed(Protocol):
    """What a checkpoint asks of the batch (`batch.IcebergBatch`)."""

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, bytes]]: ...

    def restore_state(self, head: dict[str, Any], blobs: dict[str, bytes]) -> None: ...

    def checkpoint_files(self, head: dict[str, Any]) -> list[str]: ...

#: The folder of the work files, beside the tables' folders.
RESUME = "_resume"
SUFFIX = ".work"
DIGEST_BYTES = 32
#: The name of a checkpoint's work file, before its position (the blocks it covers).
CHECKPOINT = "checkpoint-"


def resume_root(table: Table) -> str:
    """The URI of the namespace's ``_resume`` folder (the tables' folders' sibling)."""
    return f"{table.location().rstrip('/').rsplit('/', 1)[0]}/{RESUME}"


def state_tag(pinned: Pinned) -> str:
    return f"{pinned.state.n:08d}-{pinned.state.commit_snapshot or 0}"


class IcebergWorkFiles:
    """The work files of one batch: its inputs' digest on its published state."""

    def __init__(self, pinned: Pinned, inputs: str, batch: Checkpointed | None = None) -> None:
        self.batch = batch
        table = pinned.tables["bands"]
        self.io = table.io
        self.root = resume_root(table)
        self.folder = f"{self.root}/{state_tag(pinned)}-{inputs[:40]}"
        self._names: set[str] | None = None
        self.reused = 0

    def names(self) -> set[str]:
        if self._names is None:
            self._names = {s.uri.rsplit("/", 1)[-1][:-len(SUFFIX)]
                           for s in datafiles.list_files(self.folder, SUFFIX)}
        return set(self._names)

    def get(self, name: str) -> bytes | None:
        if name not in self.names():
            return None
        try:
            with self.io.new_input(self._path(name)).open() as f:
                data = f.read()
        except OSError:
            return None
        body, digest = data[:-DIGEST_BYTES], data[-DIGEST_BYTES:]
        if len(data) < DIGEST_BYTES or hashlib.sha256(body).digest() != digest:
            return None
        self.reused += 1
        return body

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        datafiles.output(path)  # a local folder is made first
        with self.io.new_output(path).create(overwrite=True) as out:
            out.write(data)
            out.write(hashlib.sha256(data).digest())

    def checkpoint(self, position: int, state: bytes) -> None:
        """The batch's data files so far closed and named, with the writer's ``state`` after
        its first ``position`` blocks, kept as one work file."""
        assert self.batch is not None
        head, blobs = self.batch.checkpoint_state()
        arrays: dict[str, Any] = {
            "head": np.frombuffer(orjson.dumps({"position": position, **head}), np.uint8),
                  "writer": np.frombuffer(state, np.uint8)}
        arrays.update({f"blob-{k}": np.frombuffer(v, np.uint8) for k, v in blobs.items()})
        out = io.BytesIO()
        np.savez(out, **arrays)
        self.put(f"{CHECKPOINT}{position:07d}", out.getvalue())

    def restore(self) -> tuple[int, bytes] | None:
        """The newest checkpoint that reads back whole and whose data files are all there
        (an `index expire` may have removed them as orphans): taken over by the batch;
        (position, the writer's state), or None."""
        assert self.batch is not None
        for name in sorted((n for n in self.names() if n.startswith(CHECKPOINT)),
                           reverse=True):
            data = self.get(name)
            if data is None:
                continue
            self.reused -= 1  # not a worker's result
            try:
                with np.load(io.BytesIO(data), allow_pickle=False) as z:
                    head = orjson.loads(z["head"].tobytes())
                    writer = z["writer"].tobytes()
                    blobs = {k[len("blob-"):]: z[k].tobytes() for k in z.files
                             if k.startswith("blob-")}
            except (ValueError, KeyError, OSError):
                continue
            if any(datafiles.file_size(p) is None for p in self.batch.checkpoint_files(head)):
                continue
            self.batch.restore_state(head, blobs)
            return int(head["position"]), writer
        return None

    def _path(self, name: str) -> str:
        return f"{self.folder}/{name}{SUFFIX}"

    def drop(self) -> None:
        """Remove this batch's work files."""
        remove(self.io, datafiles.list_files(self.folder, SUFFIX))

    def drop_through(self, pinned: Pinned) -> None:
        """Remove the work files of every state up to ``pinned``'s (once a batch on it
        committed, none can be resumed)."""
        tag = state_tag(pinned)
        head = len(self.root) + 1
        stale = [s for s in datafiles.list_files(self.root, SUFFIX)
                 if s.uri[head:head + 8].isdigit() and int(s.uri[head:head + 8])
                 <= int(tag[:8])]
        remove(self.io, stale)


def remove(io: FileIO, files: list[datafiles.Stored]) -> None:
    """Remove ``files``, and the local folders they leave empty (``_resume`` too)."""
    for f in files:
        io.delete(f.uri)
    folders = {Path(datafiles.local_path(f.uri)).parent for f in files if not f.uri.startswith("s3://")}
    for folder in sorted(folders | {f.parent for f in folders}, reverse=True):
        if folder.name.startswith(RESUME) or folder.parent.name == RESUME:
            with suppress(OSError):  # not empty: another batch's
                folder.rmdir()
