"""pyiceberg's FileIO for an index on S3 (`IndexFileIO`, named by `datafiles.FILE_IO` in the
catalog's properties): the storage layer's S3 client, and a table's metadata files read in one
request each. Its own module, so that an index in a folder never imports pyiceberg's fsspec
FileIO (and the HTTP libraries behind it)."""

from __future__ import annotations

import errno
import io
import os
from typing import Any

from pyiceberg.io.fsspec import FsspecFileIO, FsspecInputFile

from near_dedup_core.index_store.iceberg.datafiles import WAREHOUSE_PROPERTY, s3fs_of

#: Bytes of metadata files one `IndexFileIO` keeps after reading them (`WholeMetadataFile`).
KEPT_METADATA_BYTES = 32 << 20


class WholeMetadataFile(FsspecInputFile):
    """A table's metadata file (its JSON, a manifest list or a manifest) on object storage,
    which pyiceberg reads whole: fetched in one GET, without asking for its size first, and
    kept by its FileIO (``kept``) for the table's next plan. A metadata file is never
    rewritten: each version, list and manifest has a name of its own."""

    def __init__(self, location: str, fs: Any, kept: dict[str, bytes]) -> None:
        super().__init__(location=location, fs=fs)
        self._kept = kept

    def open(self, seekable: bool = True) -> Any:
        data = self._kept.get(self.location)
        if data is None:
            try:
                data = self._fs.cat_file(self.location, max_concurrency=1)
            except FileNotFoundError as exc:
                raise exc if exc.filename else FileNotFoundError(
                    errno.ENOENT, os.strerror(errno.ENOENT), self.location) from exc
            if sum(map(len, self._kept.values())) + len(data) <= KEPT_METADATA_BYTES:
                self._kept[self.location] = data
        return io.BytesIO(data)


class IndexFileIO(FsspecFileIO):
    """pyiceberg's fsspec FileIO whose S3 filesystem is the storage layer's (`s3fs_of`): the
    same client, credential chain, endpoint and bounded waits as our own reads and writes of
    the data files (through the public `get_fs`, which every read, write and delete asks).
    Metadata files on S3 are read in one request each, once per FileIO (a table as loaded:
    `WholeMetadataFile`)."""

    def __init__(self, properties: Any) -> None:
        super().__init__(properties)
        self._kept: dict[str, bytes] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_kept": {}}  # a task reads its own

    def get_fs(self, scheme: str, hostname: str | None = None) -> Any:
        if scheme in ("s3", "s3a"):
            return s3fs_of(self.properties[WAREHOUSE_PROPERTY])
        return super().get_fs(scheme, hostname)

    def new_input(self, location: str) -> FsspecInputFile:
        if location.startswith(("s3://", "s3a://")) \
                and location.endswith((".metadata.json", ".avro")):
            return WholeMetadataFile(location, self.get_fs("s3"), self._kept)
        return super().new_input(location)
