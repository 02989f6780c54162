"""A package's shards read as blocks of whole lines: one reader hashes and counts every stored
byte, and the blocks (plain bytes, lines in memory shared with the worker processes, or a
byte range of a shard on object storage that the worker reads itself) are parsed wherever
they are sent (`parse_block`); the rules across records are the reader's (`SampleIds`)."""

from __future__ import annotations

import collections
import contextlib
import gzip
import hashlib
import io
import mmap
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.package.manifest import (
    MANIFEST,
    FileEntry,
    Package,
    dependency_order,
)
from near_dedup_core.package.records import LineProblem, parse_line, resolve_ref

READ_BUFFER = 1 << 20

class HashingReader(io.RawIOBase):
    """Raw stream over an open file that hashes and counts every byte as stored on disk."""

    def __init__(self, fh) -> None:
        super().__init__()
        self._fh = fh
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._fh.readinto(buffer)
        if n:
            self.sha256.update(memoryview(buffer)[:n])
            self.size += n
        return n


#: At most this many bytes of whole lines per block (a longer line is a block of its own).
BLOCK_BYTES = 4 << 20
#: At most this many lines per block.
BLOCK_LINES = 1024


class ShardRange(NamedTuple):
    """Bytes ``start:end`` of the shard at ``url`` on object storage, as the listing the
    reader hashed it under described it (``size``, version tag ``etag``)."""

    url: str
    size: int
    etag: str | None
    start: int
    end: int

    def read(self) -> bytes:
        """The range, read through the storage layer; a shard whose size or version tag is
        no longer the listed one is refused (it is not the shard the reader hashed)."""
        from near_dedup_core.storage import FileInfo, parse_location

        with parse_location(self.url).open("", FileInfo(self.size, self.etag), self.start,
                                           self.end) as fh:
            data = fh.read()
        if len(data) != self.end - self.start:
            raise NearDedupError(f"{self.url}: read {len(data)} bytes of range "
                                 f"{self.start}:{self.end} (file changed)")
        return data


@dataclass(frozen=True, slots=True)
class LineBlock:
    """Whole lines of one shard, read and hashed by the caller, parsed by whoever gets it
    (`parse_block`, possibly in a worker process): ``first_line`` is the 1-based line number
    of its first line in the shard, ``first_position`` that record's position in the package.
    The lines are ``data``, or, with ``shared`` = (slot, start, end), bytes start:end of the
    `SharedBlocks` memory that the reader read them into, or, with ``source`` (a `ShardRange`),
    bytes start:end of a shard on object storage, read where the block is parsed (``data`` is
    then empty)."""

    package_id: str
    kind: str
    file: str
    split: str
    first_line: int
    first_position: int
    depends_on: tuple[str, ...]
    data: bytes
    line_count: int  # lines in the block (counted once, where the block is cut)
    shared: tuple[int, int, int] | None = None
    source: ShardRange | None = None

    def lines(self) -> list[bytes | memoryview]:
        if self.shared is not None:
            return _shared_lines(self.shared[1], self.shared[2])
        data = self.data if self.source is None else self.source.read()
        lines: list[bytes | memoryview] = list(data.split(b"\n"))
        if lines[-1] == b"":  # the newline that ends the last line
            lines.pop()
        return lines


class SharedBlocks:
    """Memory shared with the worker processes of one pass (an anonymous ``memfd``, gone
    with the last process that maps it), in ``slots`` slots of ``slot_bytes``: the reader
    reads and hashes a shard's bytes straight into a free slot, and the blocks cut from it
    name their lines there instead of carrying a copy; a worker parses them from its own
    mapping (`attach_shared`). The lines of a slot are those the reader hashed: a slot is
    read into again only after every block cut from it is released (`release`) by the
    consumer, which does so once the block's result is in."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.size = slots * slot_bytes
        self.fd = os.memfd_create("near-dedup-blocks", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            self.map = mmap.mmap(self.fd, self.size)
        except BaseException:
            os.close(self.fd)
            raise
        self.view = memoryview(self.map)
        self._holders = [0] * slots
        self._free = collections.deque(range(slots))

    def worker_args(self) -> tuple[_SharedFd, int]:
        """What `attach_shared` takes in a worker (picklable into a new pool process)."""
        return _SharedFd(self.fd), self.size

    def take(self) -> int:
        """A free slot, to read into."""
        if not self._free:
            raise RuntimeError("SharedBlocks: no free slot; more blocks in flight than slots")
        return self._free.popleft()

    def hold(self, slot: int) -> None:
        """One more block names lines of ``slot``."""
        self._holders[slot] += 1

    def release(self, slot: int) -> None:
        """One block of ``slot`` is done with; the slot is free once none is left."""
        self._holders[slot] -= 1
        if self._holders[slot] == 0:
            self._free.append(slot)

    def close(self) -> None:
        """Unmap and close; a slice still alive (in the traceback of an interrupted read)
        keeps the mapping until it is collected."""
        with contextlib.suppress(BufferError):
            self.view.release()
            self.map.close()
        os.close(self.fd)


class _SharedFd:
    """A file descriptor that unpickles, in a process started by multiprocessing, as that
    process's own duplicate of it (an int)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _detach_fd, (reduction.DupFd(self.fd),)


def _detach_fd(dup) -> int:
    return dup.detach()


_attached: mmap.mmap | None = None  # this worker's mapping of the pass's SharedBlocks


def attach_shared(fd: int, size: int) -> None:
    """Map the `SharedBlocks` of ``fd`` (read-only) in this worker process, for good."""
    global _attached
    try:
        _attached = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def _shared_lines(start: int, end: int) -> list[bytes | memoryview]:
    """The lines in bytes start:end of the attached shared memory, without their newlines."""
    buf = _attached
    assert buf is not None, "a block in shared memory is parsed where it is attached"
    view = memoryview(buf)
    find = buf.find
    lines: list[bytes | memoryview] = []
    while start < end:
        stop = find(b"\n", start, end)
        if stop < 0:  # a last line without its newline
            stop = end
        lines.append(view[start:stop])
        start = stop + 1
    return lines


@dataclass(frozen=True, slots=True)
class ShardEnd:
    """The end of a shard, after its last block: ``problem`` says why it is invalid (bytes,
    sha256 or record count differ from the manifest, or it could not be read), else None."""

    package_id: str
    file: str
    problem: NearDedupError | None


class ParsedBlock(NamedTuple):
    """The records of a block, in order, as (sample id, data, ref), up to its first bad line;
    ``problem`` is that line's located error (None when every line is a record)."""

    records: list[tuple[str, dict, tuple[str, str] | None]]
    problem: NearDedupError | None


def parse_block(block: LineBlock) -> ParsedBlock:
    """Check each line of ``block`` as a record of its kind (`parse_line`, and a ref must name
    a package in ``depends_on``). The rules across lines (unique ids, ref targets) are the
    reader's: see `SampleIds`."""
    depends_on = set(block.depends_on)
    records: list[tuple[str, dict, tuple[str, str] | None]] = []
    for k, raw in enumerate(block.lines()):
        try:
            data, sample_id, ref = parse_line(raw, block.kind)
            if ref is not None:
                resolve_ref(ref, depends_on, None)
        except LineProblem as problem:
            return ParsedBlock(records, NearDedupError(
                f"{where(block.package_id, block.file, block.first_line + k)}: {problem}"))
        records.append((sample_id, data, ref))
    return ParsedBlock(records, None)


class SampleIds:
    """The rules across the records of one pass, applied in record order: a sample id is
    unique within its package, and a ref names a sample of a package streamed before it
    (`dependency_order` puts depends_on first). Keeps the ids of referenced packages only."""

    def __init__(self, packages: Sequence[Package]) -> None:
        self._referenced = {dep for pkg in packages for dep in pkg.depends_on}
        self._known: dict[str, set[str]] = {}
        self._package: str | None = None
        self._ids: set[str] = set()

    def check(self, package_id: str, file: str, line: int, sample_id: str,
              ref: tuple[str, str] | None) -> None:
        if package_id != self._package:
            self._package, self._ids = package_id, set()
            if package_id in self._referenced:
                self._known[package_id] = self._ids
        if sample_id in self._ids:
            raise NearDedupError(f"{where(package_id, file, line)}: duplicate id {sample_id!r} "
                                 f"in the package")
        self._ids.add(sample_id)
        if ref is not None and ref[1] not in self._known.get(ref[0], ()):
            raise NearDedupError(f"{where(package_id, file, line)}: ref to sample {ref[1]!r} "
                                 f"of package {ref[0]}, which has no such sample")

    def state(self) -> dict:
        """What the checks so far remember, as JSON values (a batch's checkpoint)."""
        return {"package": self._package, "ids": sorted(self._ids),
                "known": {p: None if ids is self._ids else sorted(ids)
                          for p, ids in self._known.items()}}

    def restore(self, state: dict) -> None:
        """Take up the checks where `state` left them."""
        self._package, self._ids = state["package"], set(state["ids"])
        self._known = {p: self._ids if ids is None else set(ids)
                       for p, ids in state["known"].items()}

    def check_block(self, package_id: str, file: str, first_line: int, sample_ids: list[str],
                    refs: dict[int, tuple[str, str]]) -> None:
        """`check` for consecutive records from line ``first_line`` on (``refs`` by their
        index in ``sample_ids``): at once when the block has no ref and no repeated id,
        else record by record, which locates the first problem."""
        if not sample_ids:
            return
        if not refs and package_id == self._package:
            block = set(sample_ids)
            if len(block) == len(sample_ids) and self._ids.isdisjoint(block):
                self._ids |= block
                return
        for k, sample_id in enumerate(sample_ids):
            self.check(package_id, file, first_line + k, sample_id, refs.get(k))


def read_blocks(packages: Sequence[Package], block_lines: int = BLOCK_LINES,
                block_bytes: int = BLOCK_BYTES, shared: SharedBlocks | None = None,
                ranges: bool = False) -> Iterator[LineBlock | ShardEnd]:
    """The data of ``packages`` as line blocks, packages in dependency order, shards in
    manifest order, each shard followed by its `ShardEnd`. Only this reader touches the
    files: it hashes and counts every stored byte. A shard that cannot be read ends the
    stream with its ShardEnd (after the lines read before the failure).

    With ``shared``, plain shards are read into its slots and their blocks name their lines
    there (gzip shards, and a line too long for a slot, still come as bytes); the consumer
    releases each such block's slot once done with it, and keeps fewer blocks than
    ``shared.slots - 1`` unreleased whenever it asks for the next event.

    With ``ranges``, the blocks of a plain shard on object storage carry its byte range
    (`ShardRange`) instead of its lines: whoever parses the block reads the range itself,
    tied to the version the reader hashed (gzip shards, and the last line of a shard that
    lacks its newline, still come as bytes)."""
    for pkg in dependency_order(packages):
        position = 0
        for entry in pkg.files:
            shard = shard_blocks(pkg, entry, position, block_lines, block_bytes, shared,
                                 ranges)
            for event in shard:
                if isinstance(event, ShardEnd):
                    yield event
                    if event.problem is not None:
                        return
                    break
                position += event.line_count
                yield event


def _fill(reader: HashingReader, view: memoryview) -> int:
    """Read into all of ``view`` (less at the end of the file); the bytes read."""
    got = 0
    while got < len(view):
        n = reader.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def shard_blocks(  # noqa: C901 (one pass over a shard: plain, gzip and shared-memory reads)
        pkg: Package, entry: FileEntry, position: int, block_lines: int,
                  block_bytes: int, shared: SharedBlocks | None = None, ranges: bool = False
                  ) -> Iterator[LineBlock | ShardEnd]:
    depends_on = tuple(pkg.depends_on)
    line = 0  # lines handed out so far
    pending: list[bytes] = []
    listed = pkg.listing.get(entry.path) if ranges and pkg.listing is not None else None
    url = pkg.file_url(entry.path)

    def block(data: bytes, lines: int) -> LineBlock:
        return LineBlock(pkg.package_id, pkg.kind, entry.path, entry.split, line + 1,
                         position + line, depends_on, data, lines)

    try:
        with pkg.open_raw(entry.path) as raw_file:
            counter = HashingReader(raw_file)
            buffered = io.BufferedReader(counter, READ_BUFFER)
            if entry.path.endswith(".gz"):  # line by line, so a failure has its exact line
                size = 0
                with gzip.GzipFile(fileobj=buffered, mode="rb") as text:
                    for raw in text:
                        pending.append(raw)
                        size += len(raw)
                        if size >= block_bytes or len(pending) >= block_lines:
                            out = block(b"".join(pending), len(pending))
                            yield out
                            line += len(pending)
                            pending, size = [], 0
            else:
                rest = b""
                rest_at = 0  # the offset in the shard of ``rest``'s first byte
                while True:
                    # data[lo:hi] is the carried-over partial line, then the chunk just read
                    slot = -1
                    data: bytes | mmap.mmap
                    if shared is not None and len(rest) + block_bytes <= shared.slot_bytes:
                        slot = shared.take()
                        shared.hold(slot)  # this reader's hold, until it is done with the slot
                        lo = slot * shared.slot_bytes
                        try:
                            shared.view[lo:lo + len(rest)] = rest
                            n = _fill(counter, shared.view[lo + len(rest):
                                                           lo + len(rest) + block_bytes])
                        except BaseException:
                            shared.release(slot)
                            raise
                        data, hi = shared.map, lo + len(rest) + n
                    else:
                        if shared is not None:  # a long line: this reader reads unbuffered
                            buf = bytearray(block_bytes)
                            n = _fill(counter, memoryview(buf))
                            chunk = bytes(buf[:n])
                        else:
                            chunk = buffered.read(block_bytes)
                            n = len(chunk)
                        data = rest + chunk
                        lo, hi = 0, len(data)
                    if not n:
                        if slot >= 0:
                            shared.release(slot)  # type: ignore[union-attr]
                        break
                    found = data.rfind(b"\n", lo, hi)
                    end = lo if found < 0 else found + 1
                    start = lo
                    while start < end:  # pieces of at most block_lines lines
                        cut = start
                        lines = 0
                        while lines < block_lines:
                            cut = data.find(b"\n", cut, end) + 1
                            lines += 1
                            if cut == end:
                                break
                        if slot >= 0:
                            shared.hold(slot)  # type: ignore[union-attr]
                            out = LineBlock(pkg.package_id, pkg.kind, entry.path, entry.split,
                                            line + 1, position + line, depends_on, b"", lines,
                                            (slot, start, cut))
                        elif listed is not None:
                            out = LineBlock(pkg.package_id, pkg.kind, entry.path, entry.split,
                                            line + 1, position + line, depends_on, b"", lines,
                                            None, ShardRange(url, listed.size, listed.etag,
                                                             rest_at + start - lo,
                                                             rest_at + cut - lo))
                        else:
                            out = block(data[start:cut], lines)
                        yield out
                        line += lines
                        start = cut
                    rest = data[end:hi]
                    rest_at += end - lo
                    if slot >= 0:
                        shared.release(slot)  # type: ignore[union-attr]
                if rest:
                    pending.append(rest)
            if pending:
                yield block(b"".join(pending), len(pending))
                line += len(pending)
                pending = []
            while buffered.read(READ_BUFFER):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        if pending:
            yield block(b"".join(pending), len(pending))
            line += len(pending)
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        loc = where(pkg.package_id, entry.path, line + 1 if line else None)
        yield ShardEnd(pkg.package_id, entry.path,
                       NearDedupError(f"{loc}: cannot read ({detail})"))
        return
    yield ShardEnd(pkg.package_id, entry.path, _shard_end_problem(pkg.package_id, entry,
                                                                  counter, line))


def _shard_end_problem(package_id: str, entry: FileEntry, counter: HashingReader,
                       records: int) -> NearDedupError | None:
    loc = where(package_id, entry.path)
    if counter.size != entry.bytes:
        return NearDedupError(f"{loc}: read {counter.size} bytes, {MANIFEST} says {entry.bytes} "
                              f"(file changed)")
    if counter.sha256.hexdigest() != entry.sha256:
        return NearDedupError(f"{loc}: sha256 does not match {MANIFEST} (file changed)")
    if records != entry.records:
        return NearDedupError(f"{loc}: has {records} records, {MANIFEST} says {entry.records}")
    return None
