"""What every backend shares: the index format's constants and the checks of an index's
location and of its binding to a config, whichever backend holds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.invariants import UPGRADABLE_SCHEMA, restore

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig

FORMAT = "near-dedup-index"
SCHEMA_VERSION = "3"
#: The two band tables that every band lookup reads.
BAND_TABLES = ("bands", "bands_recent")


class LostCommit(NearDedupError):
    """A batch's commit refused because another writer committed first (an index whose
    writers share no lock: Iceberg with a shared catalog). Nothing of the batch was
    published; `ingest.run.index_packages` runs the batch again on the new state."""


def check_index_path(path: Path, input_dirs: list[Path]) -> None:
    """Refuse paths that are not a dedicated index file (docs/contract.md §4, index)."""
    if path.name == "pipeline.db":
        raise NearDedupError(f"index {path}: refusing pipeline.db; the index must be a dedicated file")
    resolved = path.resolve()
    for d in input_dirs:
        try:
            resolved.relative_to(d.resolve())
        except ValueError:
            continue
        raise NearDedupError(f"index {path}: inside input package {d}; packages are immutable")
    for parent in resolved.parents:
        kind = _tool_folder_kind(parent)
        if kind:
            raise NearDedupError(f"index {path}: inside {kind} {parent}; the index must live "
                                 f"outside packages, reports and mixtures")
    if path.exists() and not path.is_file():
        raise NearDedupError(f"index {path}: not a regular file")


_FOLDER_KINDS = {"training-snapshot": "snapshot package", "near-dedup-report": "near-dedup report",
                 "mixture-package": "mixture package"}


def _tool_folder_kind(folder: Path) -> str | None:
    """What ``folder`` is when its manifest.json marks a package, report or mixture."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        fmt = json.loads(manifest.read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        return None
    return _FOLDER_KINDS.get(fmt)


def check_binding(path: Path | str, values: dict[str, str], config: NearDedupConfig, *,
                  writing: bool = False) -> None:
    """The index must be ours, of our schema, and bound to this config and algorithm.
    ``writing``: a batch is about to be appended, which upgrades an index of the
    `UPGRADABLE_SCHEMA`."""
    if values.get("format") != FORMAT:
        raise NearDedupError(f"index {path}: not a near-dedup index")
    check_schema(path, values.get("schema_version"), writing=writing)
    if values.get("algorithm_version") != ALGORITHM_VERSION:
        raise NearDedupError(f"index {path}: built with algorithm {values.get('algorithm_version')}, "
                             f"this tool runs {ALGORITHM_VERSION}; use a new index path")
    if values.get("config_fingerprint") != config.fingerprint():
        raise NearDedupError(f"index {path}: bound to a different config (fingerprint "
                             f"{values.get('config_fingerprint', '?')[:12]}…, this config "
                             f"{config.fingerprint()[:12]}…); use a new index path for a new "
                             f"threshold, shingling, limits or rules")


def check_schema(path: Path | str, version: str | None, *, writing: bool = False) -> None:
    """This tool reads schema `SCHEMA_VERSION` and upgrades `UPGRADABLE_SCHEMA` when it
    appends a batch; any other schema is refused."""
    if version == SCHEMA_VERSION or (writing and version == UPGRADABLE_SCHEMA):
        return
    if version == UPGRADABLE_SCHEMA:
        raise NearDedupError(f"index {path}: schema version {version}, this tool reads "
                             f"{SCHEMA_VERSION}; the next `near-dedup index` run upgrades it in "
                             f"place (in its batch's transaction)")
    raise NearDedupError(f"index {path}: schema version {version} is not {SCHEMA_VERSION}; "
                         f"use a new index path")



def package_sources_error(label: Path | str, package_id: str, sources: int,
                          records: int) -> NearDedupError:
    return restore(label, f"package {package_id} has {sources:,} sources and {records:,} "
                          f"records")



def longest_run(ids: np.ndarray) -> tuple[int, int]:
    """(first, last) of the longest run of consecutive integers in ``ids`` (distinct, sorted),
    (1, 0), an empty range, when there are none."""
    if not len(ids):
        return 1, 0
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(ids) - 1]))
    k = int(np.argmax(ends - starts))
    return int(ids[starts[k]]), int(ids[ends[k]])


