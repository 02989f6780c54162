"""Snapshot packages (format v2, docs/contract.md §2): open and check manifests, stream
records, create.

A package is a directory holding ``manifest.json`` and JSONL shards (plain or gzip) under
``data/``. Checking happens in two stages so that a command can refuse bad input before it
writes anything, while reading every shard only once:

- `open_packages` reads manifests and file sizes only: format, lineage, listed and unlisted
  files, and the rules across one command's inputs (one kind, unique package ids, every
  ``depends_on`` among the inputs, no dependency cycle).
- `stream_records` is the single pass over the data. It yields every record while checking each
  line, and checks each shard's byte count, sha256 and record count when the shard ends.
  A consumer must treat an exception as "the whole input is invalid" and publish nothing.
  `read_blocks` is the same pass as blocks of lines for worker processes to parse.

Every error is one line that starts with the location (`errors.where`): package, file, line.

The modules: `manifest` (the manifest and the rules across inputs), `records` (one line as a
record), `blocks` (shards read as line blocks, shared memory with the workers), `stream` (the
validating pass) and `create` (`snapshot create`).
"""

from near_dedup_core.package.blocks import (
    BLOCK_BYTES,
    BLOCK_LINES,
    LineBlock,
    ParsedBlock,
    SampleIds,
    ShardEnd,
    SharedBlocks,
    attach_shared,
    parse_block,
    read_blocks,
)
from near_dedup_core.package.create import create_package, parse_split_args
from near_dedup_core.package.manifest import (
    DATA_DIR,
    FORMAT,
    FORMAT_VERSION,
    ID_PATTERN,
    ID_RE,
    KINDS,
    MANIFEST,
    SHARD_SUFFIXES,
    FileEntry,
    Package,
    dependency_order,
    load_package,
    open_packages,
)
from near_dedup_core.package.records import Record
from near_dedup_core.package.stream import head_records, stream_records, validate_packages

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_LINES",
    "DATA_DIR",
    "FORMAT",
    "FORMAT_VERSION",
    "ID_PATTERN",
    "ID_RE",
    "KINDS",
    "MANIFEST",
    "SHARD_SUFFIXES",
    "FileEntry",
    "LineBlock",
    "Package",
    "ParsedBlock",
    "Record",
    "SampleIds",
    "ShardEnd",
    "SharedBlocks",
    "attach_shared",
    "create_package",
    "dependency_order",
    "head_records",
    "load_package",
    "open_packages",
    "parse_block",
    "parse_split_args",
    "read_blocks",
    "stream_records",
    "validate_packages",
]
