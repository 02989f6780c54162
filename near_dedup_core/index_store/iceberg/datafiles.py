"""The data files of an Iceberg index, wherever its warehouse is: reached through the local
file system (``file://``) or the storage layer's S3 client (``s3://``: `s3fs_of`, also
pyiceberg's own `s3io.IndexFileIO`), listed and removed outside pyiceberg (`list_files`,
`delete_file`), written with a CRC32 in each page and read with every page checked
(`CHECKED_WRITES`, `parquet_file`; docs/iceberg.md, "Damaged data files")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


def local_path(uri: str) -> str:
    """The local path of a ``file://`` URI (as pyiceberg records them)."""
    return uri[len("file://") :] if uri.startswith("file://") else uri


_S3: dict[tuple[int, str], Any] = {}


def s3_location(url: str) -> Any:
    """The storage layer's location of ``s3://bucket`` (`storage.RemoteLocation`: the
    ordinary AWS credential chain, ``AWS_ENDPOINT_URL``, bounded waits), one per bucket and
    process."""
    from near_dedup_core.storage import RemoteLocation

    bucket = url[len("s3://") :].split("/", 1)[0]
    key = (os.getpid(), bucket)
    if key not in _S3:
        _S3[key] = RemoteLocation(f"s3://{bucket}", "s3")
    return _S3[key]


def s3fs_of(url: str) -> Any:
    """The fsspec S3 filesystem that every read and write of ``url``'s bucket goes through."""
    return s3_location(url).fs


class _OneHead(pafs.FSSpecHandler):
    """pyarrow's handler of an fsspec filesystem, opening a file for reading with one
    request for its size (the object's HEAD) instead of two: pyarrow's own asks whether it
    is a file first, and s3fs then asks for its size; a missing object is FileNotFoundError
    either way."""

    def open_input_file(self, path: str) -> Any:
        return pa.PythonFile(self.fs.open(path, mode="rb"), mode="r")


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path in it) of a data file URI as the tables record it:
    ``file:///…`` on the local file system, ``s3://bucket/key`` through the storage layer's
    S3 client. Every read of a data file outside pyiceberg goes through this."""
    if uri.startswith(("s3://", "s3a://")):
        uri = "s3://" + uri.split("://", 1)[1]
        return pafs.PyFileSystem(_OneHead(s3fs_of(uri))), uri[len("s3://") :]
    return pafs.LocalFileSystem(), local_path(uri)


#: A data file on object storage whose table records at most this many bytes for it is
#: fetched whole in one request (`read_source`); a larger one is opened, which asks for its
#: size first, and read by ranges.
WHOLE_READ_BYTES = 1 << 20


def read_source(uri: str, recorded_size: int) -> tuple[Any, Any]:
    """(source, filesystem) to hand `pyarrow.parquet.read_table` for the data file ``uri``,
    which its table records as ``recorded_size`` bytes: on object storage a small file is
    the bytes of one GET (the object as it is, whatever size it has now); otherwise the
    path in `filesystem`."""
    if recorded_size <= WHOLE_READ_BYTES and uri.startswith(("s3://", "s3a://")):
        path = "s3://" + uri.split("://", 1)[1]
        return pa.BufferReader(s3fs_of(path).cat_file(path, max_concurrency=1)), None
    fs, path = filesystem(uri)
    return path, fs


def output(uri: str) -> tuple[Any, str]:
    """`filesystem` for a new data file: its local folder is made first (object storage has
    no folders). Every data file the index writes outside pyiceberg goes through this."""
    fs, path = filesystem(uri)
    if not uri.startswith("s3://"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return fs, path


#: A data file written with a CRC32 of each page (`CHECKED_WRITES`) says so in its footer's
#: key-value metadata; files without it (written by earlier versions) are read unchecked.
CHECKSUMS_KEY = b"near_dedup.page_checksums"
#: The writer options of every data file the index writes: a CRC32 in each page header,
#: verified by every read (`parquet_file`, `read`) and by `index check`.
CHECKED_WRITES: dict[str, Any] = {"write_page_checksum": True}
#: pyarrow's message for a page whose bytes do not match its CRC32.
CHECKSUM_FAILED = "CRC checksum verification failed"


def with_checksum_mark(schema: pa.Schema) -> pa.Schema:
    """``schema`` carrying `CHECKSUMS_KEY`, for a data file written with `CHECKED_WRITES`."""
    return schema.with_metadata({**(schema.metadata or {}), CHECKSUMS_KEY: b"crc32"})


def parquet_file(uri: str) -> Any:
    """A data file opened as `pyarrow.parquet.ParquetFile` (through `filesystem`), every page
    read checked against its CRC32 when the file has them."""
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    return pq.ParquetFile(path, filesystem=fs, page_checksum_verification=True)


def read_rows(pf: Any, groups: list[int], rows: Any, columns: list[str]
              ) -> tuple[pa.Table, int]:
    """``columns`` of the rows ``rows`` (sorted positions in the row groups ``groups`` of the
    `pyarrow.parquet.ParquetFile` ``pf`` read one after another, as a column read of those
    row groups lists them), reading only the row groups that hold one of them; and how many
    row groups that is."""
    import numpy as np

    meta = pf.metadata
    sizes = np.array([meta.row_group(g).num_rows for g in groups], np.int64)
    first = np.concatenate(([0], np.cumsum(sizes)))
    group_of = np.searchsorted(first, rows, "right") - 1
    holding = np.unique(group_of)
    held_first = np.concatenate(([0], np.cumsum(sizes[holding])))
    table = pf.read_row_groups([groups[i] for i in holding.tolist()], columns=columns,
                               use_threads=False)
    at = rows - first[group_of] + held_first[np.searchsorted(holding, group_of)]
    return table.take(at), len(holding)


@dataclass(frozen=True)
class Stored:
    """A file under a table's folder: its URI, size and modification time (epoch s)."""

    uri: str
    size: int
    mtime: float


def list_files(folder_uri: str, suffix: str = ".parquet") -> list[Stored]:
    """Every file ending in ``suffix`` under ``folder_uri`` (a table's data folder)."""
    if folder_uri.startswith("s3://"):
        fs = s3fs_of(folder_uri)
        found = fs.find(folder_uri[len("s3://") :], detail=True)
        out = []
        for name, info in found.items():
            if info.get("type") == "file" and name.endswith(suffix):
                modified = info.get("LastModified")
                out.append(
                    Stored(
                        f"s3://{name}",
                        int(info.get("size") or 0),
                        modified.timestamp() if modified is not None else 0.0,
                    )
                )
        return sorted(out, key=lambda s: s.uri)
    root = Path(local_path(folder_uri))
    if not root.is_dir():
        return []
    return sorted(
        (
            Stored(f"file://{p}", p.stat().st_size, p.stat().st_mtime)
            for p in root.rglob(f"*{suffix}")
        ),
        key=lambda s: s.uri,
    )


def delete_file(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.delete_file(path)


def file_size(uri: str) -> int | None:
    """The size of a data file, None when it is missing."""
    fs, path = filesystem(uri)
    info = fs.get_file_info(path)
    return None if info.type == pafs.FileType.NotFound else int(info.size)


WAREHOUSE_PROPERTY = "warehouse"


#: pyiceberg loads a FileIO by its module path (`s3io`, imported only for an index on S3).
FILE_IO = "near_dedup_core.index_store.iceberg.s3io.IndexFileIO"
