"""What the audit tools read besides a report's own files: its input packages.

A frozen report names its input packages (``inputs[].path`` and ``manifest_sha256``) and, in
``origins.jsonl``, the shard file and line of every sample. That is enough to re-read any
sample's text without the index: open the package, read that one line, follow a ``ref`` to
the referenced package's sample (whose file and line are in ``origins.jsonl`` too, since a
``depends_on`` package is always among the inputs), take the compared text and normalize it.

A package that is no longer at its path, or whose manifest changed since the report was
frozen, is *unavailable*: its texts and domains are not read (a changed package could hold
other text under the same ids), and the tools say so in one note per package instead of
failing, because everything in the report itself is still valid.

Reading is streaming: shards are read line by line, only the requested lines are parsed.
"""

from __future__ import annotations

import gzip
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from near_dedup_core.compare import compared_text
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.formats.report import OriginRow, ReportManifest, origin_rows
from near_dedup_core.normalize import normalize
from near_dedup_core.package import MANIFEST, FileEntry, load_package
from near_dedup_core.storage import is_url, parse_location

Key = tuple[str, str]  # (package_id, sample_id)


class PackageRecord(Protocol):
    """A package as a report's manifest records it."""

    @property
    def package_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def manifest_sha256(self) -> str: ...

#: Longest chain of refs followed (a ref may point at a sample that is itself a ref).
MAX_REF_DEPTH = 16


@dataclass(frozen=True)
class InputPackage:
    """One input of a report; ``problem`` is the one-line note when it cannot be read."""

    package_id: str
    kind: str
    path: Path | str  # a local folder, or a URL (`storage`)
    manifest_sha256: str
    problem: str | None
    depends_on: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    entries: tuple[FileEntry, ...] = ()

    @property
    def available(self) -> bool:
        return self.problem is None

    def shard(self, file: str) -> FileEntry:
        """The manifest entry of a data file the report names; a file the package does not
        list (an absolute path, ``../``, any other file) is refused: the tools never read
        outside the input packages."""
        for entry in self.entries:
            if entry.path == file:
                return entry
        raise NearDedupError(f"{where(self.package_id)}: {file!r} is not a data file of the "
                             f"package (origins.jsonl names it); nothing outside the input "
                             f"packages is read")


@dataclass(frozen=True)
class SampleText:
    """A sample's compared text as read from its package (``text`` before normalization)."""

    key: Key
    file: str
    line: int
    text: str
    normalized: str
    domain: str | None


def report_inputs(manifest: ReportManifest, report: str | Path | None = None
                  ) -> dict[str, InputPackage]:
    """The report's input packages by id, each checked against the manifest sha256 the report
    recorded (a cheap check: manifest bytes and file sizes, no data read); ``report``, the
    report's folder, is where a package recorded by a relative path is also looked for
    (`candidates`)."""
    return input_packages(manifest.inputs, report)


#: Folders where packages are also looked for (``--packages``; `searching`).
_SEARCH: tuple[Path, ...] = ()


@contextmanager
def searching(folders: Sequence[str | Path]) -> Iterator[None]:
    """Within the block, input packages are also looked for in ``folders`` (`candidates`)."""
    global _SEARCH
    before = _SEARCH
    _SEARCH = before + tuple(Path(f) for f in folders)
    try:
        yield
    finally:
        _SEARCH = before


def candidates(recorded: str, report: str | Path | None = None) -> list[Path | str]:
    """Where a package recorded at ``recorded`` is looked for, in order: a URL, or the path as
    recorded (an absolute path; a relative one from the current folder, as the scan was given
    it); for a relative path, below each folder holding the report, nearest first (a report
    written inside the folder the scan ran in); then, for each ``--packages`` folder, the
    relative path below it and the package's folder name in it."""
    if is_url(recorded):
        return [recorded]
    path = Path(recorded)
    found: list[Path | str] = [path]
    if not path.is_absolute() and report is not None and not is_url(str(report)):
        found += [folder / path for folder in Path(report).absolute().parents]
    for folder in _SEARCH:
        found += [folder / path] if not path.is_absolute() else []
        found.append(folder / path.name)
    return list(dict.fromkeys(found))


def input_packages(items: Iterable[PackageRecord], report: str | Path | None = None
                   ) -> dict[str, InputPackage]:
    """`report_inputs` for any list of recorded packages (a contamination report's inputs and
    evals list them the same way). A package is the first of its `candidates` whose id and
    manifest sha256 are the recorded ones."""
    out: dict[str, InputPackage] = {}
    for item in items:
        pid, sha = item.package_id, item.manifest_sha256
        places = candidates(item.path, report)
        path = places[0]
        problem: str | None = None
        depends: tuple[str, ...] = ()
        entries: tuple[FileEntry, ...] = ()
        changed = None
        for place in places:
            try:
                pkg = load_package(place)
            except NearDedupError as exc:
                if problem is None:
                    problem = f"package {pid} is no longer readable at {path} ({exc}" + \
                        _hint(item.path, len(places) > 1) + "; its texts are not shown"
                continue
            if pkg.package_id != pid or pkg.manifest_sha256 != sha:
                changed = changed or (
                    f"package {pid} at {place} has changed since the report was frozen "
                    f"(manifest sha256 {pkg.manifest_sha256[:12]}…, the report recorded "
                    f"{sha[:12]}…); its texts are not shown")
                continue
            path, problem, changed = place, None, None
            depends = tuple(pkg.depends_on)
            entries = tuple(pkg.files)
            break
        out[pid] = InputPackage(pid, item.kind, path, sha, changed or problem, depends,
                                tuple(e.path for e in entries), entries)
    return out


def _hint(recorded: str, searched: bool) -> str:
    """The end of a not-found note's parenthesis: where else was looked, what to pass."""
    if is_url(recorded):
        return ")"
    name = Path(recorded).name
    if Path(recorded).is_absolute():
        looked = "; nor in the --packages folders" if searched else ""
        return (f"{looked}): pass --packages DIR, a folder that holds {name}/")
    looked = "; nor below the folders holding the report or --packages" if searched else ""
    return (f"{looked}): the path is relative to the folder the scan ran in; run there, "
            f"or pass --packages DIR, that folder or one that holds {name}/")


def shard_lines(path: Path | str) -> Iterator[bytes]:
    """The raw lines of one data file (a path, or a URL streamed through `storage`),
    gunzipped when its name ends in ``.gz``; not checked (see `check_shard`)."""
    if isinstance(path, str):  # a URL: streamed through `storage`
        with parse_location(path).open("") as raw:
            yield from (gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz")
                        else raw)
    elif path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            yield from fh
    else:
        with open(path, "rb") as fh:
            yield from fh


def check_shard(pkg: InputPackage, file: str) -> Path | str:
    """The path of one data file of ``pkg`` after checking its bytes against the package's
    manifest (size and sha256): a shard edited since the package was made, even with the
    same size, is one line naming the package and file, never a text shown as the sample's."""
    entry = pkg.shard(file)
    path = pkg.path / entry.path if isinstance(pkg.path, Path) else f"{pkg.path}/{entry.path}"
    loc = where(pkg.package_id, entry.path)
    try:
        with (open(path, "rb") if isinstance(path, Path)
              else parse_location(path).open("")) as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        raise NearDedupError(f"{loc}: cannot read ({exc.strerror})") from None
    if digest != entry.sha256:
        raise NearDedupError(f"{loc}: the package no longer matches its {MANIFEST} (sha256 of "
                             f"the file differs; the file changed)")
    return path


def read_lines(pkg: InputPackage, file: str, lines: set[int]) -> dict[int, dict]:
    """The parsed records at these 1-based line numbers of one shard (checked first)."""
    out: dict[int, dict] = {}
    last = max(lines)
    path = check_shard(pkg, file)
    try:
        for n, raw in enumerate(shard_lines(path), 1):
            if n in lines:
                out[n] = orjson.loads(raw)
            if n >= last:
                break
    except (OSError, EOFError, orjson.JSONDecodeError) as exc:
        raise NearDedupError(f"{where(pkg.package_id, file)}: cannot read ({exc})") from None
    missing = sorted(lines - set(out))
    if missing:
        raise NearDedupError(f"{where(pkg.package_id, file, missing[0])}: no such line; the "
                             f"report does not match the package")
    return out


def locate(report: Path, keys: Iterable[Key]) -> dict[Key, OriginRow]:
    """origins.jsonl rows of these samples: one streamed pass over the file."""
    wanted = set(keys)
    found: dict[Key, OriginRow] = {}
    if not wanted:
        return found
    for _, row in origin_rows(report):
        key = row.key
        if key in wanted:
            found[key] = row
            if len(found) == len(wanted):
                break
    return found


def read_samples(report: Path, inputs: dict[str, InputPackage], origins: dict[Key, OriginRow]
                 ) -> dict[Key, SampleText]:
    """Compared texts of the located samples whose packages are available; refs are followed
    through the referenced packages (located in ``origins.jsonl``). Samples of unavailable
    packages, or whose ref chain leads into one, are left out."""
    records: dict[Key, dict] = {}
    located: dict[Key, tuple[str, int]] = {}
    todo = {k: o for k, o in origins.items()}
    for _ in range(MAX_REF_DEPTH):
        by_file: dict[tuple[str, str], dict[int, Key]] = defaultdict(dict)
        for key, o in todo.items():
            pkg = inputs.get(key[0])
            if pkg is not None and pkg.available and key not in records:
                by_file[(key[0], o.file)][o.line] = key
                located[key] = (o.file, o.line)
        for (pid, file), line_keys in sorted(by_file.items()):
            for n, data in read_lines(inputs[pid], file, set(line_keys)).items():
                if not isinstance(data, dict) or data.get("id") != line_keys[n][1]:
                    raise NearDedupError(f"{where(pid, file, n)}: holds no sample "
                                         f"{line_keys[n][1]!r}; origins.jsonl does not match "
                                         f"the package")
                records[line_keys[n]] = data
        targets = set()
        for data in records.values():
            ref = data.get("ref")
            if isinstance(ref, dict):
                target = _ref_key(ref)
                if target not in records:
                    targets.add(target)
        if not targets:
            break
        todo = locate(report, targets)
    out: dict[Key, SampleText] = {}
    for key in origins:
        resolved = _resolve(key, records)
        if resolved is None:
            continue
        data, domain = resolved
        kind = inputs[key[0]].kind
        file, line = located[key]
        try:
            text = compared_text(kind, data)
        except (KeyError, TypeError):
            text = None
        if not isinstance(text, str):
            raise NearDedupError(f"{where(key[0], file, line)}: no {kind} text to compare; the "
                                 f"record does not match the report")
        out[key] = SampleText(key, file, line, text, normalize(text), domain)
    return out


def _ref_key(ref: dict) -> Key:
    """The (package_id, sample_id) a record's ``ref`` points at."""
    return (str(ref.get("package_id")), str(ref.get("id")))


def _resolve(key: Key, records: dict[Key, dict]) -> tuple[dict, str | None] | None:
    """(content record, domain) of a sample: a ref takes its target's content and, when it
    has no domain of its own, its target's domain."""
    data = records.get(key)
    domain = None
    for _ in range(MAX_REF_DEPTH):
        if data is None:
            return None
        if domain is None and data.get("domain") is not None:
            domain = str(data["domain"])
        ref = data.get("ref")
        if not isinstance(ref, dict):
            return data, domain
        data = records.get(_ref_key(ref))
    return None


@dataclass
class Domains:
    """Domain of every sample of a report's available packages; ``missing`` lists the
    unavailable packages, whose samples count with domain None."""

    by_sample: dict[Key, str | None]
    missing: list[InputPackage]

    def of(self, key: Key) -> str | None:
        return self.by_sample.get(key)


def sample_domains(inputs: dict[str, InputPackage]) -> Domains:
    """One pass over every shard of the available packages (dependency order, so that a ref
    without its own domain takes its target's)."""
    available = [p for p in inputs.values() if p.available]
    missing = [p for p in inputs.values() if not p.available]
    domains: dict[Key, str | None] = {}
    interned: dict[str, str] = {}
    for pkg in _in_dependency_order(available):
        for file in pkg.files:
            path = check_shard(pkg, file)
            try:
                for raw in shard_lines(path):
                    data = orjson.loads(raw)
                    domain = data.get("domain")
                    ref = data.get("ref")
                    if domain is None and isinstance(ref, dict):
                        domain = domains.get(_ref_key(ref))
                    if domain is not None:
                        domain = interned.setdefault(str(domain), str(domain))
                    domains[(pkg.package_id, data["id"])] = domain
            except (OSError, EOFError, orjson.JSONDecodeError, KeyError) as exc:
                raise NearDedupError(f"package {pkg.package_id}, {file}: cannot read "
                                     f"({exc})") from None
    return Domains(domains, missing)


def _in_dependency_order(packages: list[InputPackage]) -> list[InputPackage]:
    """Each package after the ones it depends on (among these); otherwise in input order."""
    ids = {p.package_id for p in packages}
    order: list[InputPackage] = []
    done: set[str] = set()
    pending = list(packages)
    while pending:
        ready = [p for p in pending if all(d in done or d not in ids for d in p.depends_on)]
        if not ready:  # a cycle cannot pass package validation; keep the input order
            ready = pending[:1]
        for p in ready:
            order.append(p)
            done.add(p.package_id)
        pending = [p for p in pending if p.package_id not in done]
    return order
