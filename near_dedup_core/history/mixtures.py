"""Which shipped mixtures contained a sample, read from the mixtures' frozen files alone:
``manifest.json`` (its inputs: each package id with its manifest's sha256) and the data
files it lists, each checked against the sha256 the manifest records, whose lines name their
sample (``origin``). A sample is matched by package id, package manifest sha256 and sample
id, so a mixture built from another package of the same id does not count."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import orjson

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import read_model
from near_dedup_core.mixture.formats import FORMAT, MixtureManifest
from near_dedup_core.storage import Location, local_folder, parse_location


class ShippedMixtures:
    """The samples of some mixtures: (package id, package manifest sha256, sample id) ->
    the mixtures, as given on the command line, that hold it."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        self.names: list[str] = []

    @classmethod
    def read(cls, paths: Sequence[str | Path | Location]) -> ShippedMixtures:
        """The mixtures at ``paths``: each a mixture folder, or a local folder whose
        mixtures are its subfolders (the release's mixture root), taken in name order."""
        shipped = cls()
        for given in paths:
            for location in _mixtures_at(parse_location(given)):
                name = str(location.local_path or location.url)
                if name in shipped.names:
                    continue
                with local_folder(location) as folder:
                    shipped._add(name, folder)
                shipped.names.append(name)
        return shipped

    def _add(self, name: str, folder: Path) -> None:
        label = f"mixture {name}"
        if not folder.is_dir():
            raise NearDedupError(f"{label}: not a directory")
        manifest = read_model(folder / "manifest.json", MixtureManifest, label)
        sha = {i.package_id: i.manifest_sha256 for i in manifest.inputs}
        for entry in manifest.files:
            path = folder / entry.path
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise NearDedupError(f"{label}: {entry.path} cannot be read "
                                     f"({exc.strerror or exc})") from None
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise NearDedupError(f"{label}: {entry.path} does not match the sha256 in "
                                     f"manifest.json")
            for n, raw in enumerate(data.splitlines(), 1):
                try:
                    origin = orjson.loads(raw).get("origin")
                    key = (origin["package_id"], origin["sample_id"])
                except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
                    raise NearDedupError(f"{label}: {entry.path}:{n}: no origin "
                                         f"{{package_id, sample_id}}") from None
                if key[0] not in sha:
                    raise NearDedupError(f"{label}: {entry.path}:{n}: package {key[0]} is not "
                                         f"an input of the mixture")
                held = self._held[(key[0], sha[key[0]], key[1])]
                if not held or held[-1] != name:
                    held.append(name)

    def containing(self, package_id: str, manifest_sha256: str, sample_id: str) -> list[str]:
        """The mixtures holding this sample, in the order they were given."""
        return list(self._held.get((package_id, manifest_sha256, sample_id), ()))


def _is_mixture(folder: Path) -> bool:
    try:
        manifest = orjson.loads((folder / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def _mixtures_at(location: Location) -> list[Location]:
    """``location`` itself, or, for a local folder without a ``manifest.json``, its
    subfolders that are mixtures (a folder holding none is one line)."""
    path = location.local_path
    if path is None or not path.is_dir() or (path / "manifest.json").exists():
        return [location]
    found = [parse_location(p) for p in sorted(path.iterdir()) if _is_mixture(p)]
    if not found:
        raise NearDedupError(f"{path}: neither a mixture nor a folder of mixtures")
    return found
