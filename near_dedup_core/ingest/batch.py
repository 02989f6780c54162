"""The main process of `index`: read the packages as line blocks, hand them to the workers,
and turn their results into rows, in input order, inside the open batch transaction.

The main process reads and hashes every byte once (`package.read_blocks`; for a local pool
straight into `package.SharedBlocks`, which the workers parse from; for Ray tasks and a
package on object storage, it sends each block as a byte range of its shard, which the
task reads from the storage itself) and does what
needs the whole batch: sample-id and ref rules across records (`package.SampleIds`), row ids
for new contents (a content met again later in the batch, or indexed before under another
raw text, keeps its first row id and loses the signature a worker made for it), and the
writes. Raw-text rows are written with their block (sorted within it); band rows once at
the end, sorted, so that their B-tree (the index's largest) fills front to back, or, for an
index that takes them as the batch goes (`index_store.Batch.band_writer`: Iceberg's, whose
executor tasks write them as data files), a chunk at a time.

Blocks are taken in order: the results of block *b* are applied before those of *b + 1*,
whatever finished first, so row ids, error messages and the index's rows do not depend on
the number of workers. About ``IN_FLIGHT_PER_WORKER`` blocks per worker are in flight.

Texts are compressed with trained zstd dictionaries, one per group of ``DICT_GROUP`` blocks
with new content. The first group's is trained on its first block; the blocks sent while that
one is under way come back with their texts uncompressed, and the main process compresses
them with its dictionary as it applies them (the same bytes a worker would make; a few blocks,
at the start, where the main process has time to spare), so no worker waits for the first
dictionary. Every later group's is trained ahead, on the block ``DICT_LEAD`` blocks before
the group starts (compressed itself with the dictionary of its own group), so that it is
ready before it is needed while the workers stay busy; it is stored when its group starts,
and not at all when the batch ends first. A block too small to train on leaves its group the
previous dictionary; the first group's previous one is the index's newest, stored by an
earlier batch (a cumulative snapshot, whose blocks hold a few dozen new texts each, never
trains one: with the newest dictionary its new texts take about a quarter less room than
without one). Which block trains which dictionary, and which dictionary compresses which
block, depends on the block count and the index alone, never on the workers.

A batch whose index keeps work files for a rerun (`index_store.WorkFiles`: an Iceberg day)
also keeps a checkpoint every `CHECKPOINT_BLOCKS` blocks: every block in flight applied, the
index's files closed, this writer's state kept (`BatchWriter._state`). A rerun after a kill
takes over the newest one and reads the blocks before it only to check them.
"""

from __future__ import annotations

import collections
import io
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from itertools import repeat
from typing import NamedTuple

import numpy as np
import orjson

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.index_store import BandChunks, BandWrite, Batch, RefTarget, WorkFiles
from near_dedup_core.ingest import replay, work
from near_dedup_core.package import (
    BLOCK_BYTES,
    LineBlock,
    Package,
    SampleIds,
    ShardEnd,
    SharedBlocks,
    read_blocks,
)
from near_dedup_core.params import WorkerParams
from near_dedup_core.progress import Progress, pause_point

#: Lines per block (about 4 MB of web documents; `package.BLOCK_BYTES` caps the bytes).
BLOCK_LINES = 1024
#: A batch whose work a rerun can resume (`index_store.WorkFiles`) keeps a checkpoint every
#: this many blocks (about 65,000 records): its files closed and the writer's state kept, so
#: that a rerun after a kill reads the blocks before it only to check them.
CHECKPOINT_BLOCKS = 64
#: Blocks with new content per trained text dictionary (about 100,000 records).
DICT_GROUP = 100
#: How many blocks before its group a later group's dictionary is trained: more than the
#: blocks in flight (`_window`) of any pool that gets the group's first block in time.
DICT_LEAD = 16
#: Blocks in flight per worker. Results are applied in block order, so while the main
#: process waits for an older block, a worker that is done needs a queued one: at 1M records
#: (py-spy of a worker) the workers waited for work 2.5–2.8 % of their time with 2, about
#: 1 % with 3.
IN_FLIGHT_PER_WORKER = 3


def _window(parallelism: int) -> int:
    return max(2, IN_FLIGHT_PER_WORKER * parallelism)


def shared_blocks(workers: int) -> SharedBlocks | None:
    """The shared memory that a local pool of ``workers`` processes reads line blocks from:
    a slot per block in flight, one for the block being read, one to spare. None where the
    system has no ``memfd_create`` (the blocks then travel through the pool's pipes)."""
    if not hasattr(os, "memfd_create"):
        return None
    return SharedBlocks(_window(workers) + 2, 2 * BLOCK_BYTES)


class _InFlight(NamedTuple):
    block: LineBlock
    dictionary: int | None  # id of the dictionary the block's texts are compressed with
    train: bool  # the block trains a dictionary
    use_trained: bool  # … and compresses with it (the batch's first block with new content)
    deferred: bool  # sent while that block was under way: its texts come back uncompressed
    future: Future
    keep: str | None = None  # the name to keep the worker's result under (`WorkFiles`)


class BatchWriter:
    """Holds the open transaction's state: id maps, blocks in flight, counters."""

    def __init__(self, store: Batch, config: NearDedupConfig, batch: int,
                 executor: Executor, parallelism: int, known_texts: str | None,
                 progress: Progress, shared: SharedBlocks | None = None,
                 ranges: bool = False, work: WorkFiles | None = None) -> None:
        self.store = store
        self.config = config
        self.batch = batch
        self.executor = executor
        self.window = _window(parallelism)
        self.shared = shared  # from `shared_blocks(parallelism)`, or None
        self.ranges = ranges  # blocks of shards on object storage go as byte ranges
        self.known_texts = known_texts
        self.progress = progress
        self.params = WorkerParams.of(config)
        self.scope_ids = store.scope_ids()
        self.next_content = store.max_content_rowid() + 1
        self.first_content = self.next_content
        self.batch_contents: dict[bytes, int] = {}
        #: the index's answers for blocks in flight, asked with an earlier block's
        #: (`_known_contents`)
        self.known_ahead: dict[Future, dict[bytes, int]] = {}
        self.ref_targets: dict[str, dict[str, RefTarget]] = {}
        self.in_flight: collections.deque[_InFlight | ShardEnd] = collections.deque()
        self.band_keys: list[np.ndarray] = []
        self.band_contents: list[np.ndarray] = []
        self.band_rows = 0  # in band_keys
        # an index whose band rows leave as the batch goes (to tasks of the executor)
        self.band_chunks = store.band_writer(executor, parallelism)
        self.raw_texts: set[tuple[bytes, int]] = set()  # (text_sha256, scope) written
        self.bands: BandWrite | None = None
        self.new_contents = 0
        self.new_sources = 0
        # until the batch trains its own: the index's newest (a cumulative snapshot's blocks
        # hold too few new texts to train on)
        newest = store.newest_dictionary()
        self.dictionary: tuple[int | None, bytes | None] = newest if newest else (None, None)
        self.first_dictionary: tuple[int | None, bytes | None] = (None, None)  # first group's
        self.content_blocks = 0  # blocks with new content submitted so far
        self.awaiting_dictionary = False  # the first block, training its own, is in flight
        self.training_ahead = False  # a block training the next group's dictionary is in flight
        self.trained_ahead: bytes | None = None  # the next group's dictionary, once trained
        self.work = work  # where the workers' results are kept for a rerun (`replay`)
        self.submitted = 0  # blocks submitted so far
        self.finished = 0  # blocks applied so far
        self.reused = 0  # blocks whose result a killed earlier run kept
        self.restored = 0  # blocks applied by the killed run whose checkpoint this one took

    # -- refs
    def track_targets(self, package_ids: set[str], indexed: dict[str, int]) -> None:
        """Remember (content, text_sha256, domain) per sample of packages that refs point into;
        already indexed ones are read from the index."""
        for pid in package_ids:
            self.ref_targets[pid] = self.store.ref_targets(indexed[pid]) if pid in indexed else {}

    # -- the pass
    def run(self, pkgs: Sequence[Package], new_rowids: dict[str, int]) -> None:
        """Read every block of ``pkgs`` (packages not in ``new_rowids`` are only checked) and
        write the batch's rows; raises the first problem in input order."""
        self.new_rowids = new_rowids
        self.ids = SampleIds(pkgs)
        self.tokenizers = {p.package_id: p.tokenizer for p in pkgs}
        restored = self.work.restore() if self.work is not None else None
        skip = self._restore(*restored) if restored is not None else 0
        for event in read_blocks(pkgs, block_lines=BLOCK_LINES, shared=self.shared,
                                 ranges=self.ranges):
            if isinstance(event, ShardEnd):
                self.in_flight.append(event)
            elif skip:
                # applied by the killed try whose checkpoint this run took over: its bytes
                # are still read and checked (the shard's sha256, at its end)
                skip -= 1
                if event.shared is not None:
                    assert self.shared is not None
                    self.shared.release(event.shared[0])
                if event.package_id in self.new_rowids:
                    self.progress.advance(event.line_count)
            else:
                if self.submitted % CHECKPOINT_BLOCKS == 0 and self.submitted > self.restored:
                    self._checkpoint()
                self._submit(event)
            while len(self.in_flight) > self.window:
                self._finish(self.in_flight.popleft())
        while self.in_flight:
            self._finish(self.in_flight.popleft())
        self._write_tail()

    def _submit(self, block: LineBlock) -> None:
        validate_only = block.package_id not in self.new_rowids
        train = use_trained = deferred = False
        if not validate_only:
            count = self.content_blocks
            # the dictionary of the group this block is in: the first block's own (not waited
            # for in the first group: compressed here later), or trained ahead (waited for
            # only if still in flight)
            while ((self.awaiting_dictionary and count >= DICT_GROUP)
                   or (count % DICT_GROUP == 0 and self.training_ahead)):
                self._finish(self.in_flight.popleft())
            deferred = self.awaiting_dictionary
            if count % DICT_GROUP == 0 and self.trained_ahead is not None:
                self.dictionary = (self.store.add_dictionary(self.batch, self.trained_ahead),
                                   self.trained_ahead)
                self.trained_ahead = None
            use_trained = count == 0
            train = use_trained or (count + DICT_LEAD) % DICT_GROUP == 0
            self.content_blocks += 1
            self.awaiting_dictionary = self.awaiting_dictionary or use_trained
            self.training_ahead = self.training_ahead or (train and not use_trained)
        dict_id, dict_data = self.dictionary
        job = work.BlockJob(block, self.params, self.tokenizers[block.package_id],
                            self.known_texts, dict_data, train, use_trained, validate_only,
                            compress=not deferred)
        keep = None
        future = None
        if self.work is not None:
            keep = replay.job_name(self.submitted, job)
            future = self._kept(keep)
        self.submitted += 1
        if future is None:
            future = self.executor.submit(work.process_block, job)
        else:
            keep = None
        self.in_flight.append(_InFlight(block, dict_id, train, use_trained, deferred, future,
                                        keep))

    # -- checkpoints (a batch whose work a killed try's rerun resumes)
    def _checkpoint(self) -> None:
        """Every block submitted so far applied, the band rows handed over and written, and
        the batch's files closed and kept with this writer's state (`WorkFiles.checkpoint`),
        so that a rerun after a kill starts from here."""
        if self.work is None or self.band_chunks is None:
            return
        while self.in_flight:
            self._finish(self.in_flight.popleft())
        if self.band_keys:
            self._hand_bands(self.band_chunks)
        self.band_chunks.finish()
        self.work.checkpoint(self.submitted, self._state())

    def _state(self) -> bytes:
        """This writer's state between two blocks, all applied (`_checkpoint`): NumPy's
        ``.npz`` without pickles, one JSON member."""
        def bytes_of(value: bytes | None) -> np.ndarray:
            return np.frombuffer(value or b"", np.uint8)

        head = {"submitted": self.submitted, "finished": self.finished,
                "next_content": self.next_content, "new_contents": self.new_contents,
                "new_sources": self.new_sources, "scope_ids": self.scope_ids,
                "dictionary": self.dictionary[0], "has_dictionary": self.dictionary[1] is not None,
                "first_dictionary": self.first_dictionary[0],
                "has_first": self.first_dictionary[1] is not None,
                "content_blocks": self.content_blocks,
                "awaiting": self.awaiting_dictionary, "training": self.training_ahead,
                "has_trained": self.trained_ahead is not None, "ids": self.ids.state(),
                "targets": {pid: {sid: [r.content, r.text_sha256.hex(), r.domain]
                                  for sid, r in targets.items()}
                            for pid, targets in self.ref_targets.items()}}
        contents = list(self.batch_contents.items())
        raw = sorted(self.raw_texts)
        out = io.BytesIO()
        np.savez(out, head=np.frombuffer(orjson.dumps(head), np.uint8),
                 content_ids=bytes_of(b"".join(c for c, _ in contents)),
                 content_rows=np.array([r for _, r in contents], np.int64),
                 raw_shas=bytes_of(b"".join(s for s, _ in raw)),
                 raw_scopes=np.array([s for _, s in raw], np.int64),
                 dictionary=bytes_of(self.dictionary[1]),
                 first_dictionary=bytes_of(self.first_dictionary[1]),
                 trained=bytes_of(self.trained_ahead))
        return out.getvalue()

    def _restore(self, position: int, state: bytes) -> int:
        """Take up the state a killed try kept at its checkpoint after ``position`` blocks
        (`_state`); the blocks to skip."""
        with np.load(io.BytesIO(state), allow_pickle=False) as z:
            head = orjson.loads(z["head"].tobytes())
            ids, rows = z["content_ids"].tobytes(), z["content_rows"].tolist()
            shas, scopes = z["raw_shas"].tobytes(), z["raw_scopes"].tolist()
            dictionary, first = z["dictionary"].tobytes(), z["first_dictionary"].tobytes()
            trained = z["trained"].tobytes()
        if head["submitted"] != position:
            raise ValueError("a checkpoint of another position")
        self.submitted = self.restored = position
        self.reused = position
        self.finished = head["finished"]
        self.next_content = head["next_content"]
        self.new_contents, self.new_sources = head["new_contents"], head["new_sources"]
        self.scope_ids = head["scope_ids"]
        self.dictionary = (head["dictionary"], dictionary if head["has_dictionary"] else None)
        self.first_dictionary = (head["first_dictionary"], first if head["has_first"] else None)
        self.content_blocks = head["content_blocks"]
        self.awaiting_dictionary, self.training_ahead = head["awaiting"], head["training"]
        self.trained_ahead = trained if head["has_trained"] else None
        self.ids.restore(head["ids"])
        self.ref_targets = {pid: {sid: RefTarget(c, bytes.fromhex(sha), dom)
                                  for sid, (c, sha, dom) in targets.items()}
                            for pid, targets in head["targets"].items()}
        self.batch_contents = {ids[16 * i:16 * i + 16]: r for i, r in enumerate(rows)}
        self.raw_texts = {(shas[32 * i:32 * i + 32], s) for i, s in enumerate(scopes)}
        return position

    def _kept(self, name: str) -> Future | None:
        """The result that a killed earlier run of this batch kept for this job, if any and
        whole (`replay`), as a finished future."""
        assert self.work is not None
        data = self.work.get(name)
        if data is None:
            return None
        try:
            res = replay.decode(data)
        except (ValueError, KeyError, OSError, TypeError):  # not a result of this version
            return None
        self.reused += 1
        future: Future = Future()
        future.set_result(res)
        return future

    def _finish(self, item: _InFlight | ShardEnd) -> None:
        if isinstance(item, ShardEnd):
            if item.problem is not None:
                raise item.problem
            return
        block = item.block
        res: work.BlockResult = item.future.result()
        if item.keep is not None and res.problem is None:
            assert self.work is not None
            self.work.put(item.keep, replay.encode(res))
        if block.shared is not None:
            assert self.shared is not None
            self.shared.release(block.shared[0])
        self.ids.check_block(block.package_id, block.file, block.first_line, res.sample_ids,
                             res.refs)
        if res.problem is not None:
            raise res.problem
        if block.package_id not in self.new_rowids:
            return
        dict_id = item.dictionary
        if item.use_trained:
            self.awaiting_dictionary = False
            if res.dictionary is not None:
                dict_id = self.store.add_dictionary(self.batch, res.dictionary)
                self.dictionary = (dict_id, res.dictionary)
            self.first_dictionary = self.dictionary
        elif item.train:
            self.training_ahead = False
            self.trained_ahead = res.dictionary
        if item.deferred:
            dict_id, dict_data = self.first_dictionary
            if res.new is not None:
                res = res._replace(new=res.new._replace(
                    blobs=db.compress_texts(res.new.blobs, dict_data)))
        self._apply(block, res, dict_id, self._known_contents(item, res))
        self.progress.advance(len(res.sample_ids))
        self.finished += 1
        pause_point("index-write")
        pause_point(f"index-block-{self.finished}")  # (a test kills the run there)

    # -- rows
    def _scope_id(self, key: str, label: str) -> int:
        sid = self.scope_ids.get(key)
        if sid is None:
            sid = self.scope_ids[key] = self.store.add_scope(key, label)
        return sid

    def _known_contents(self, item: _InFlight, res: work.BlockResult) -> dict[bytes, int]:
        """The content row ids the index holds for the new contents of ``item``'s block
        (``res``; contents indexed under other raw texts), asked together with those of the
        blocks in flight whose results are in: one lookup for several blocks, since a
        lookup's cost is mostly per call (an Iceberg lookup probes each file its keys' buckets
        hold once a call; docs/iceberg.md, "Lookups"). The answers hold only contents of
        earlier batches; the batch's own are in ``batch_contents``, asked first."""
        found = self.known_ahead.pop(item.future, None)
        if found is not None:
            return found
        if res.new is None or self.first_content == 1:
            return {}
        asked = set(res.new.content_ids)
        ahead = []
        for other in self.in_flight:
            if (isinstance(other, _InFlight) and other.future not in self.known_ahead
                    and other.block.package_id in self.new_rowids and other.future.done()
                    and other.future.exception() is None):
                new = other.future.result().new
                if new is not None:
                    asked.update(new.content_ids)
                    ahead.append(other.future)
        found = self.store.known_contents(sorted(asked.difference(self.batch_contents)))
        for future in ahead:
            self.known_ahead[future] = found
        return found

    def _apply(self, block: LineBlock, res: work.BlockResult, dict_id: int | None,
               indexed: dict[bytes, int]) -> None:
        scope_ids = [self._scope_id(key, label) for key, label in res.scopes]
        new = res.new
        taken: list[tuple[int, int]] = []  # (row in res.new, new row id)
        raw_known: dict[tuple[bytes, str], int] = {}
        if self.known_texts is None and self.first_content > 1:  # the workers could not look
            raw_known = self.store.known_raw_texts(
                sorted({s for k, s in enumerate(res.shas) if s is not None and not res.known[k]}))
        pkg_rowid = self.new_rowids[block.package_id]
        targets = self.ref_targets.get(block.package_id)
        # per record: its content row id, text_sha256 and domain; only the records whose raw
        # text the workers did not find (and refs) need more than the workers' lists
        rowids = list(res.known)
        raw_rows: list[tuple[bytes, int, int]] = []
        shas, domains = res.shas, res.domains
        if res.refs:
            shas, domains = list(shas), list(domains)
        for k in [k for k, rowid in enumerate(rowids) if not rowid]:
            ref = res.refs.get(k)
            if ref is None:
                sha = shas[k]
                assert sha is not None
                rowid = raw_known.get((sha, res.scopes[res.scope_of[k]][0]), 0)
                if not rowid:
                    assert new is not None
                    j = res.new_of[k]
                    cid = new.content_ids[j]
                    rowid = self.batch_contents.get(cid) or indexed.get(cid, 0)
                    if not rowid:
                        rowid = self.batch_contents[cid] = self.next_content
                        self.next_content += 1
                        taken.append((j, rowid))
                    raw = (sha, scope_ids[res.scope_of[k]])
                    if raw not in self.raw_texts:
                        self.raw_texts.add(raw)
                        raw_rows.append((sha, raw[1], rowid))
            else:
                target = self.ref_targets[ref[0]][ref[1]]
                rowid, shas[k] = target.content, target.text_sha256
                if domains[k] is None:
                    domains[k] = target.domain
            rowids[k] = rowid
        if targets is not None:
            for sample_id, rowid, sha, domain in zip(res.sample_ids, rowids, shas, domains,
                                                     strict=True):
                targets[sample_id] = RefTarget(rowid, sha, domain)  # type: ignore[arg-type]
        n = len(rowids)
        source_rows = list(zip(repeat(None, n), rowids, repeat(pkg_rowid, n), res.sample_ids,
                               repeat(block.split, n), repeat(block.file, n),
                               range(block.first_line, block.first_line + n),
                               range(block.first_position, block.first_position + n),
                               shas, domains, res.sources, strict=True))
        self.store.add_sources(source_rows)
        self.new_sources += len(source_rows)
        if raw_rows:
            raw_rows.sort()
            self.store.add_raw_texts(raw_rows)
        if taken:
            assert new is not None
            self._write_contents(self._content_rows(new, taken, scope_ids, dict_id))
            long = [(j, rowid) for j, rowid in taken
                    if new.norm_chars[j] >= self.config.min_chars]
            if long:
                rows = np.fromiter((j for j, _ in long), np.int64, len(long))
                long_ids = np.fromiter((r for _, r in long), np.int64, len(long))
                self.band_keys.append(new.keys[rows].reshape(-1))
                self.band_contents.append(np.repeat(long_ids, new.keys.shape[1]))
                self.band_rows += len(self.band_keys[-1])
                if self.band_chunks is not None \
                        and self.band_rows >= self.band_chunks.chunk_rows:
                    self._hand_bands(self.band_chunks)

    def _content_rows(self, new: work.NewContents, taken: list[tuple[int, int]],
                      scope_ids: list[int], dict_id: int | None) -> list[tuple]:
        min_chars = self.config.min_chars
        rows = []
        for j, rowid in taken:
            nchars = int(new.norm_chars[j])
            is_long = nchars >= min_chars
            rows.append((rowid, new.content_ids[j], scope_ids[new.scopes[j]], self.batch, nchars,
                         int(new.sizes[j]) if is_long else None,
                         new.sigs[j].tobytes() if is_long else None, new.blobs[j], dict_id))
        return rows

    def _write_contents(self, rows: list[tuple]) -> None:
        self.store.add_contents(rows)
        self.new_contents += len(rows)

    def _hand_bands(self, chunks: BandChunks) -> None:
        """The band rows gathered so far, handed over as one chunk."""
        keys = np.concatenate(self.band_keys)
        contents = np.concatenate(self.band_contents)
        self.band_keys, self.band_contents, self.band_rows = [], [], 0
        chunks.add(keys, contents)

    def _write_tail(self) -> None:
        """The batch's band rows in (key, content) order, so that the band B-tree is filled
        front to back (contents grow along the batch: a stable sort by key is that order),
        one key range after another (`ordered_key_ranges`). An index that took them in
        chunks (`band_chunks`) gets the last one, and waits for them all to be written."""
        self.raw_texts = set()  # every raw-text row is written: freed before the sort
        if self.band_chunks is not None:
            if self.band_keys:
                self._hand_bands(self.band_chunks)
            self.bands = self.band_chunks.finish()
            return
        if not self.band_keys:
            return
        keys = np.concatenate(self.band_keys)
        contents = np.concatenate(self.band_contents)
        self.band_keys, self.band_contents = [], []
        self.bands = self.store.write_bands(
            ordered_key_ranges(keys, contents), lambda text: self.progress.note(f"index: {text}"))


#: Band rows per key range in `ordered_key_ranges` (at most `MAX_KEY_RANGES` ranges).
KEY_RANGE_ROWS = 1 << 20
MAX_KEY_RANGES = 8


def ordered_key_ranges(keys: np.ndarray, contents: np.ndarray
                       ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The rows (``keys[i]``, ``contents[i]``) in stable key order, as (keys, contents) arrays
    of consecutive key ranges: every key of a range is below every key of the next.

    Ordering a range is numpy work that runs without the GIL, so the next range is ordered
    in a thread while the caller writes this one's rows (SQLite's inserts, which release the
    GIL in each step): only the first range's sort is waited for. Ranges split the span of
    the keys into equal parts, about `KEY_RANGE_ROWS` rows each for uniform hashes; keys far
    from uniform make uneven ranges, never a different order. Within a range, rows keep
    their positions' order for equal keys (`stable_argsort`), so the concatenation is
    exactly ``np.argsort(keys, kind="stable")``'s order."""
    n = len(keys)
    count = min(MAX_KEY_RANGES, 1 << max(0, (n // KEY_RANGE_ROWS).bit_length() - 1))
    if count == 1:
        order = stable_argsort(keys)
        yield keys[order], contents[order]
        return
    span = keys.view(np.uint64) ^ np.uint64(1 << 63)  # (a copy) signed order as unsigned
    span -= span.min()
    shift = max(0, int(span.max()).bit_length() - (count.bit_length() - 1))
    span >>= np.uint64(shift)
    which = span.astype(np.uint8)  # 0 … count - 1
    del span

    def ordered(r: int) -> tuple[np.ndarray, np.ndarray]:
        at = np.flatnonzero(which == r)
        at = at[stable_argsort(keys[at])]
        return keys[at], contents[at]

    with ThreadPoolExecutor(1, thread_name_prefix="band-order") as ahead:
        next_range = ahead.submit(ordered, 0)
        for r in range(count):
            current = next_range.result()
            if r + 1 < count:
                next_range = ahead.submit(ordered, r + 1)
            yield current


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for int64 keys, several times faster on large
    arrays: numpy sorts plain integers with SIMD, but its stable argsort is a merge sort.

    Each key's top ``64 - b`` bits (order-preserving as unsigned) and its position in the low
    ``b`` bits (``2^b ≥ len(keys)``) make one integer; sorting those orders the keys by their
    top bits, then by position. Equal keys are then in position order, as required; distinct
    keys that share their top bits (for uniform hashes, about ``n² / 2^(65 - b)`` pairs) may
    be out of order, and only those short runs are sorted again by (key, position). Keys far
    from uniform (many such runs) take numpy's stable argsort."""
    n = len(keys)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    b = np.uint64((n - 1).bit_length())
    packed = keys.view(np.uint64) ^ np.uint64(1 << 63)  # (a copy) signed order as unsigned
    packed >>= b
    packed <<= b
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & np.uint64((1 << int(b)) - 1)).astype(np.int64)
    top = packed
    top >>= b
    same = np.flatnonzero(top[1:] == top[:-1])  # neighbours that share their top bits
    wrong = same[keys[order[same + 1]] < keys[order[same]]]
    if len(wrong) == 0:
        return order
    runs = np.unique(np.searchsorted(top, top[wrong], "left"))
    if len(runs) > 64 + n // 4096:  # keys far from uniform: the plain stable sort
        return np.argsort(keys, kind="stable")
    for lo in runs.tolist():
        hi = int(np.searchsorted(top, top[lo], "right"))
        run = order[lo:hi]
        order[lo:hi] = run[np.lexsort((run, keys[run]))]
    return order
