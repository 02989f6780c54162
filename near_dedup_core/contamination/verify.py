"""`report verify` of a contamination report, its re-derivation from its packages, and what a
mixture reads from a verified report.

A report alone proves that its files agree with each other: every file parses into its strict
model (`report`), the folder holds exactly its files, and every cross-reference is re-derived
(the counts and the summary from the pair lines, each pair's packages among those the manifest
lists, pairs unique and in report order, one kind of pool, the config complete and valid). It
cannot prove that no pair was removed. With the packages it names at hand, `rederive` runs
the check again and compares: ``report verify --inputs`` does, and so does every mixture
that drops a report's contaminated samples (docs/contamination.md, "Trust")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination.kernels import EXTRA_HITS
from near_dedup_core.contamination.probe import ANCHOR_ORDER, fixed_words
from near_dedup_core.contamination.report import (
    FORMAT,
    FORMAT_VERSION,
    NEW_IN_V2,
    NEW_IN_V4,
    VERSIONS,
    Manifest,
    ManifestV1,
    PairLine,
    PairLineV1,
    SetAsideLine,
    SummaryV1,
    counts_of,
    models_of,
    problem,
    summarize,
)
from near_dedup_core.contamination.setaside import WORD
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import (
    CHECKSUMS,
    iter_json_objects,
    json_line,
    read_json_object,
    sha256_file,
    verify_checksums,
)
from near_dedup_core.package import Package, load_package
from near_dedup_core.results import FolderResult
from near_dedup_core.wording import count


def is_contamination_report(path: Path) -> bool:
    """Whether ``path/manifest.json`` declares a contamination report (no other check)."""
    try:
        return read_json_object(Path(path) / "manifest.json", "report").get("format") == FORMAT
    except NearDedupError:
        return False


@dataclass
class ContaminationSummary(FolderResult):
    """A verified contamination report (a local folder): its manifest as read and as its
    model."""

    path: Path
    manifest: dict
    model: ManifestV1
    rederived: bool = False

    def summary(self) -> str:
        c = self.counts
        how = (", and the same pairs re-derived from its packages" if self.rederived else
               f" (format {self.model.format_version}: its pairs are re-derived by the tool "
               f"that made it)" if self.model.format_version != FORMAT_VERSION else
               " (its packages are not at the paths it records: re-derive the pairs with "
               "--inputs)")
        return (f"contamination report {self.path}: OK — checksums, manifest, summary and "
                f"{count(c['pairs'], 'pair')} consistent ({c['items_leaked']:,} of "
                f"{c['items_checked']:,} eval items leaked into "
                f"{c['training_samples_contaminated']:,} training samples){how}")


def iter_lines(path: Path) -> Iterator[tuple[int, dict]]:
    return iter_json_objects(path, "contamination.jsonl", f"contamination report {path}")


def pair_lines(path: Path) -> Iterator[PairLineV1]:
    """The pairs of a verified contamination report's ``contamination.jsonl``, in file
    order (`PairLine`, or `PairLineV1` for a format 1 report)."""
    model = models_of(_version(path)).pair
    for n, row in iter_lines(path):
        try:
            yield model.model_validate(row)
        except ValidationError as exc:
            raise NearDedupError(f"contamination report {path}: contamination.jsonl:{n}: "
                                 f"{problem(exc)}") from None


def _version(path: Path) -> int:
    version = read_json_object(Path(path) / "manifest.json", "report").get("format_version")
    return version if type(version) is int and version in VERSIONS else FORMAT_VERSION


def read_summary(path: Path) -> SummaryV1:
    """``summary.json`` of a verified contamination report, as its format's model."""
    return _read_summary(Path(path), f"contamination report {path}", _version(path))


def set_aside_lines(path: Path) -> list[SetAsideLine]:
    """The lines of a verified report's ``set_aside.jsonl`` (none in format 1)."""
    if _version(path) == 1:
        return []
    return [SetAsideLine.model_validate(row) for _, row in
            iter_json_objects(Path(path), "set_aside.jsonl", f"contamination report {path}")]


def _line_problem(line: PairLineV1, threshold: float, evals: dict[str, int],
                  inputs: dict[str, int], version: int) -> str | None:
    e, t = line.eval, line.training
    if e.package_id not in evals:
        return f"eval package {e.package_id} is not among the manifest's evals"
    if t.package_id not in inputs:
        return f"training package {t.package_id} is not among the manifest's inputs"
    n, c = line.item_shingles, line.common_shingles
    if c > n:
        return "common_shingles is more than item_shingles"
    if line.containment != c / n:
        return f"containment {line.containment} is not common_shingles / item_shingles = {c / n}"
    if line.containment < threshold:
        return f"containment {line.containment} is below the threshold {threshold}"
    if line.span.start >= line.span.end:
        return "span must have start < end"
    if isinstance(line, PairLine):
        if len(line.training_text) != line.span.end - line.span.start:
            return "training_text is not as long as its span"
        if len(line.item_text) != line.item_span.end - line.item_span.start:
            return "item_text is not as long as its item_span"
        if line.method == "exact":
            return _exact_problem(line, version)
    return None


def _exact_problem(line: PairLine, version: int) -> str | None:
    """What is wrong with an exact match: in format 2, fewer than all its item's words but
    one; from format 3, words of the item (its ``item_text``) and of the span
    (``training_text``) that differ in place other than ``item_shingles −
    common_shingles`` of them, or a number among them (from format 4, nor an identifier of
    the item: `probe.fixed_words`)."""
    n, c = line.item_shingles, line.common_shingles
    if version == 2:
        return "an exact match holds every word of its item, or all but one" if c < n - 1 \
            else None
    mine, theirs = WORD.findall(line.item_text), WORD.findall(line.training_text)
    if len(mine) != n or len(theirs) != n:
        return "an exact match's item_text and training_text each hold item_shingles words"
    differ = [a for a, b in zip(mine, theirs, strict=True) if a != b]
    if len(differ) != n - c:
        return "an exact match differs from its item in item_shingles − common_shingles words"
    if any(a.isdigit() for a in differ):
        return "an exact match holds every number of its item"
    if version >= 4 and fixed_words(" ".join(differ)):
        return "an exact match holds every identifier of its item (letters and digits)"
    return None


def _order_key(line: PairLineV1, evals: dict[str, int], inputs: dict[str, int]) -> tuple:
    """Report order as far as the report shows it: eval package (as listed), then within one
    data file by line; the same for the training sample of one item."""
    e, t = line.eval, line.training
    return (evals[e.package_id], e.file, e.line, inputs[t.package_id], t.file, t.line)


def _read_manifest(path: Path, label: str) -> tuple[dict, ManifestV1, NearDedupConfig]:
    raw = read_json_object(path / "manifest.json", label)
    if raw.get("format") != FORMAT:
        raise NearDedupError(f"{label}: manifest.json is not a contamination report manifest")
    version = raw.get("format_version")
    if version not in VERSIONS or type(version) is not int:
        raise NearDedupError(f"{label}: manifest.json: format_version {version!r} is not one "
                             f"this tool reads ({', '.join(map(str, VERSIONS))})")
    try:
        manifest = models_of(version).manifest.model_validate(raw)
    except ValidationError as exc:
        raise NearDedupError(f"{label}: manifest.json: {problem(exc)}") from None
    try:
        config = NearDedupConfig.model_validate(manifest.config)
    except ValidationError as exc:
        raise NearDedupError(f"{label}: manifest.json: config: {problem(exc)}") from None
    complete = config.model_dump(mode="json")
    for since, keys in ((2, NEW_IN_V2), (4, NEW_IN_V4)):
        if version < since:
            if any(key in manifest.config for key in keys):
                raise NearDedupError(f"{label}: manifest.json: config of a format {version} "
                                     f"report holds keys of format {since}")
            complete = {k: v for k, v in complete.items() if k not in keys}
    if complete != manifest.config:
        raise NearDedupError(f"{label}: manifest.json: config is not complete (every key of "
                             f"the config, as the writer records it)")
    if (manifest.candidates.order, manifest.candidates.extra_hits) != (ANCHOR_ORDER,
                                                                       EXTRA_HITS):
        raise NearDedupError(f"{label}: manifest.json: candidates is not this tool's filter "
                             f"(order and extra_hits)")
    seen: dict[str, str] = {}
    for group, packages in (("evals", manifest.evals), ("inputs", manifest.inputs)):
        for k, pkg in enumerate(packages):
            if pkg.package_id in seen:
                raise NearDedupError(f"{label}: manifest.json: {group}[{k}]: package "
                                     f"{pkg.package_id} is listed twice (also in "
                                     f"{seen[pkg.package_id]})")
            seen[pkg.package_id] = group
    kind = manifest.inputs[0].kind
    for k, pkg in enumerate(manifest.inputs):
        if pkg.kind != kind:
            raise NearDedupError(f"{label}: manifest.json: inputs[{k}].kind is {pkg.kind}, "
                                 f"inputs[0].kind {kind}: a pool is all cpt or all sft")
    return raw, manifest, config


def verify_contamination(path: str | Path, inputs: Sequence[str | Path] | None = None, *,
                         workers: int = 1, recorded: bool = False) -> ContaminationSummary:
    """Check a contamination report folder: checksums, exactly its files, each file against
    its model, every line, and the summary and counts recomputed from the lines. With
    ``inputs`` (paths of every package the manifest names, evals and pool), the pairs are
    re-derived from them and must be the report's (`rederive`); with ``recorded`` and no
    ``inputs``, from the packages at the paths the manifest records, when every one of them
    is there with the manifest sha256 it records (`report verify`). Raises NearDedupError
    naming the first problem (file, and line where there is one)."""
    path = Path(path)
    label = f"contamination report {path}"
    if not path.is_dir():
        raise NearDedupError(f"{label}: not a directory")
    listed = verify_checksums(path, "contamination report")
    expected = {"manifest.json", *models_of(_version(path)).files}
    for name in sorted(expected - set(listed)):
        raise NearDedupError(f"{label}: {name} is not listed in checksums.sha256")
    for name in sorted(set(listed) - expected):
        raise NearDedupError(f"{label}: {name} is no file of a contamination report "
                             f"(it holds {', '.join(sorted(expected))} and {CHECKSUMS})")
    raw, manifest, config = _read_manifest(path, label)
    models = models_of(manifest.format_version)
    evals = {e.package_id: k for k, e in enumerate(manifest.evals)}
    pool = {i.package_id: k for k, i in enumerate(manifest.inputs)}
    lines: list[PairLineV1] = []
    previous: tuple | None = None
    seen: set[tuple[str, str, str, str]] = set()
    for n, row in iter_lines(path):
        try:
            line = models.pair.model_validate(row)
        except ValidationError as exc:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: {problem(exc)}") from None
        bad = _line_problem(line, config.contamination_threshold, evals, pool,
                            manifest.format_version)
        if bad is not None:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: {bad}")
        pair = (line.eval.package_id, line.eval.sample_id, line.training.package_id,
                line.training.sample_id)
        if pair in seen:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: the pair appears twice")
        seen.add(pair)
        key = _order_key(line, evals, pool)
        if previous is not None and _out_of_order(previous, key):
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: out of order (pairs are "
                                 f"sorted by eval package, eval record, training package, "
                                 f"training record)")
        previous = key
        lines.append(line)
    if manifest.files.pairs.lines != len(lines):
        raise NearDedupError(f"{label}: contamination.jsonl has {len(lines)} lines, "
                             f"manifest.json says {manifest.files.pairs.lines}")
    aside = _set_aside(path, label, manifest, evals, pool) if manifest.format_version > 1 \
        else None
    summary = _read_summary(path, label, manifest.format_version)
    eval_counts = [{"package_id": e.package_id, "items": e.items,
                    "items_checked": e.items_checked,
                    "items_skipped_short": e.items_skipped_short} for e in summary.evals]
    if [e["package_id"] for e in eval_counts] != list(evals):
        raise NearDedupError(f"{label}: summary.json evals differ from manifest.json evals")
    for e, listed_eval in zip(summary.evals, manifest.evals, strict=True):
        if e.items != listed_eval.records or e.items_checked + e.items_skipped_short != e.items:
            raise NearDedupError(f"{label}: summary.json item counts of {e.package_id} do "
                                 f"not add up to its records in manifest.json")
    if summary.training.samples != sum(i.records for i in manifest.inputs):
        raise NearDedupError(f"{label}: summary.json training samples differ from the "
                             f"inputs' records in manifest.json")
    if summarize(lines, eval_counts, summary.training.samples, aside) != summary:
        raise NearDedupError(f"{label}: summary.json does not match contamination.jsonl")
    if manifest.counts != counts_of(summary):
        raise NearDedupError(f"{label}: counts in manifest.json do not match "
                             f"contamination.jsonl and summary.json")
    result = ContaminationSummary(path, raw["counts"], raw, manifest)
    if inputs is None and recorded and manifest.format_version == FORMAT_VERSION:
        inputs = _recorded_packages(manifest)
    if inputs is not None:
        _rederive_given(path, manifest, config, inputs, workers)
        result.rederived = True
    return result


def _rederive_given(path: Path, manifest: ManifestV1, config: NearDedupConfig,
                    inputs: Sequence[str | Path], workers: int) -> None:
    if manifest.format_version != FORMAT_VERSION:
        raise NearDedupError(f"contamination report {path}: a format "
                             f"{manifest.format_version} report: this tool writes format "
                             f"{FORMAT_VERSION} and cannot re-derive its pairs (run "
                             f"contamination again for a current report)")
    by_id = {}
    for p in inputs:
        pkg = load_package(p)
        if pkg.package_id in by_id:
            raise NearDedupError(f"{where(pkg.package_id)}: given twice with --inputs")
        by_id[pkg.package_id] = pkg
    rederive(path, manifest, config, by_id, workers=workers)


def _set_aside(path: Path, label: str, manifest: ManifestV1, evals: dict[str, int],
               pool: dict[str, int]) -> list[SetAsideLine]:
    """The lines of ``set_aside.jsonl``, each checked against the manifest."""
    assert isinstance(manifest, Manifest)
    out = []
    least = {"common": manifest.config["contamination_common_samples"],
             "template": manifest.config.get("contamination_template_samples")}
    for n, row in iter_json_objects(path, "set_aside.jsonl", label):
        try:
            line = SetAsideLine.model_validate(row)
        except ValidationError as exc:
            raise NearDedupError(f"{label}: set_aside.jsonl:{n}: {problem(exc)}") from None
        bad = None
        if line.eval.package_id not in evals:
            bad = f"eval package {line.eval.package_id} is not among the manifest's evals"
        elif line.example.package_id not in pool:
            bad = f"training package {line.example.package_id} is not among the inputs"
        elif (line.reason == "allowlist") != (line.allowlist_entry is not None):
            bad = "allowlist_entry is given exactly for the reason allowlist"
        elif line.allowlist_entry is not None and line.allowlist_entry >= len(
                manifest.allowlist):
            bad = f"allowlist_entry {line.allowlist_entry} is not in manifest.json's allowlist"
        elif line.reason == "template" and manifest.format_version < 4:
            bad = f"reason template is not one of a format {manifest.format_version} report"
        elif line.reason in least and line.training_samples < int(least[line.reason]):  # type: ignore[call-overload]
            bad = (f"training_samples {line.training_samples} is below "
                   f"contamination_{line.reason}_samples {least[line.reason]}")
        if bad is not None:
            raise NearDedupError(f"{label}: set_aside.jsonl:{n}: {bad}")
        out.append(line)
    if manifest.files.set_aside.lines != len(out):
        raise NearDedupError(f"{label}: set_aside.jsonl has {len(out)} lines, manifest.json "
                             f"says {manifest.files.set_aside.lines}")
    return out


def _recorded_packages(manifest: ManifestV1) -> list[str] | None:
    """The paths the manifest records for its eval and pool packages, if every one of them
    opens there with the manifest sha256 the report records; None otherwise (moved, changed,
    or on another machine: the report's own files are all that can be checked)."""
    paths = []
    for entry in [*manifest.evals, *manifest.inputs]:
        try:
            pkg = load_package(entry.path)
        except NearDedupError:
            return None
        if pkg.manifest_sha256 != entry.manifest_sha256:
            return None
        paths.append(entry.path)
    return paths


def _out_of_order(previous: tuple, key: tuple) -> bool:
    """Whether ``key`` cannot follow ``previous`` in report order: an earlier eval package,
    or the same eval data file with an earlier line, or, for the same item, an earlier
    training package or the same training file with an earlier line (or the same)."""
    if key[0] != previous[0]:
        return key[0] < previous[0]
    if key[1] == previous[1] and key[2] != previous[2]:
        return key[2] < previous[2]
    if key[1:3] != previous[1:3]:
        return False
    if key[3] != previous[3]:
        return key[3] < previous[3]
    return key[4] == previous[4] and key[5] <= previous[5]


def _read_summary(path: Path, label: str, version: int = FORMAT_VERSION) -> SummaryV1:
    raw = read_json_object(path / "summary.json", label)
    try:
        return models_of(version).summary.model_validate(raw)
    except ValidationError as exc:
        raise NearDedupError(f"{label}: summary.json: {problem(exc)}") from None


def rederive(path: Path, manifest: ManifestV1, config: NearDedupConfig,
             packages: dict[str, Package], *, workers: int = 1) -> None:
    """Run the contamination check again on the packages the manifest names (``packages``
    by id: each one listed, with the same manifest sha256, none other) under the report's
    config, and require the report's pairs, summary and counts. The report's own files have
    been verified; this is what a report alone cannot show: that no pair was removed,
    added or changed, and that the config and candidates are the ones that made it."""
    from near_dedup_core import ALGORITHM_VERSION
    from near_dedup_core.contamination.run import compute, report_lines

    label = f"contamination report {path}"
    if manifest.algorithm_version != ALGORITHM_VERSION:
        raise NearDedupError(f"{label}: made by algorithm {manifest.algorithm_version}, this "
                             f"tool runs {ALGORITHM_VERSION}: its pairs cannot be re-derived")
    named = [*manifest.evals, *manifest.inputs]
    for entry in named:
        pkg = packages.get(entry.package_id)
        if pkg is None:
            raise NearDedupError(f"{label}: package {entry.package_id} (manifest.json "
                                 f"{'evals' if entry in manifest.evals else 'inputs'}) is not "
                                 f"among the packages given to re-derive its pairs")
        if pkg.manifest_sha256 != entry.manifest_sha256 or pkg.kind != entry.kind:
            raise NearDedupError(f"{label}: package {entry.package_id} at {pkg.path} is not "
                                 f"the one the report names (manifest sha256 "
                                 f"{pkg.manifest_sha256[:12]}…, the report's "
                                 f"{entry.manifest_sha256[:12]}…)")
    extra = sorted(set(packages) - {e.package_id for e in named})
    if extra:
        raise NearDedupError(f"{label}: package {extra[0]} is not named by the report")
    from near_dedup_core.contamination.items import open_evals
    from near_dedup_core.package import open_packages

    evals = open_evals([packages[e.package_id].path for e in manifest.evals])
    pool = open_packages([packages[i.package_id].path for i in manifest.inputs])
    assert isinstance(manifest, Manifest)
    fresh = compute(config, evals, pool, workers=workers, allowlist=manifest.allowlist)
    mine = (path / "contamination.jsonl").read_bytes().splitlines(keepends=True)
    theirs = [json_line(row) for row in report_lines(fresh.lines)]
    if mine != theirs:
        raise NearDedupError(f"{label}: contamination.jsonl{_first_difference(mine, theirs)}")
    if (path / "set_aside.jsonl").read_bytes() != b"".join(
            json_line(row) for row in report_lines(fresh.set_aside)):
        raise NearDedupError(f"{label}: set_aside.jsonl differs from the items set aside when "
                             f"re-derived from its packages")
    if fresh.summary != _read_summary(path, label):
        raise NearDedupError(f"{label}: summary.json differs from the one re-derived from its "
                             f"packages")
    for name in ("counts", "candidates"):
        if getattr(fresh.manifest, name) != getattr(manifest, name):
            raise NearDedupError(f"{label}: manifest.json: {name} differ from those re-derived "
                                 f"from its packages under its config")


def _pair_key(raw: bytes) -> tuple[str, str, str, str]:
    line = PairLine.model_validate_json(raw)  # a re-derived report is the current format
    return (line.eval.package_id, line.eval.sample_id, line.training.package_id,
            line.training.sample_id)


def _pair_name(key: tuple[str, str, str, str]) -> str:
    return f"eval {key[0]}/{key[1]} in training {key[2]}/{key[3]}"


def _first_difference(mine: list[bytes], theirs: list[bytes]) -> str:
    """Where the report's pair lines (verified, so each parses) part from the re-derived
    ones: a re-derived pair the report lacks, a pair it has that is not re-derived, or the
    first line whose values differ."""
    have = {_pair_key(raw): n for n, raw in enumerate(mine, 1)}
    want = [_pair_key(raw) for raw in theirs]
    missing = [key for key in want if key not in have]
    if missing:
        return (f" lacks {len(missing):,} of the {len(want):,} pairs re-derived from its "
                f"packages (first: {_pair_name(missing[0])})")
    extra = sorted(n for key, n in have.items() if key not in set(want))
    if extra:
        return f":{extra[0]}: a pair that is not re-derived from its packages"
    n = next(n for n, (a, b) in enumerate(zip(mine, theirs, strict=False), 1) if a != b)
    return (f":{n}: differs from the pair re-derived from its packages "
            f"({_pair_name(_pair_key(theirs[n - 1]))})")


@dataclass(frozen=True)
class ContaminationView:
    """What a mixture needs from a verified contamination report."""

    path: Path
    manifest_sha256: str
    checksums_sha256: str
    manifest: dict
    model: ManifestV1
    contaminated: set[tuple[str, str]]  # training (package_id, sample_id) of the lines
    contaminated_split: dict[tuple[str, str], str]

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]


def read_contamination(path: Path) -> ContaminationView:
    """Verify a contamination report and load its contaminated training samples."""
    verified = verify_contamination(path)
    split: dict[tuple[str, str], str] = {}
    for line in pair_lines(path):
        split[(line.training.package_id, line.training.sample_id)] = line.training.split
    return ContaminationView(path=path, manifest_sha256=sha256_file(path / "manifest.json"),
                             checksums_sha256=sha256_file(path / CHECKSUMS),
                             manifest=verified.manifest, model=verified.model,
                             contaminated=set(split), contaminated_split=split)


def recheck_for_mixture(view: ContaminationView, pool: list[Package], kind: str,
                        workers: int = 1) -> None:
    """A mixture that drops a report's contaminated samples keeps the rest: it re-derives
    the report's pairs first (`rederive`), from its own input packages (``pool``, which must
    be the report's inputs) and the eval packages at the paths the report records, so that
    a report with pairs removed cannot keep contaminated samples in a mixture."""
    label = f"contamination report {view.path}"
    model = view.model
    if model.inputs[0].kind != kind:
        raise NearDedupError(f"{label}: its pool is {model.inputs[0].kind}, the mixture is "
                             f"{kind}")
    packages = {p.package_id: p for p in pool}
    for entry in model.evals:
        try:
            pkg = load_package(entry.path)
        except NearDedupError as exc:
            raise NearDedupError(f"{label}: eval package {entry.package_id} is needed at the "
                                 f"path the report records, to re-derive its pairs: "
                                 f"{exc}") from None
        packages.setdefault(pkg.package_id, pkg)
    if model.format_version != FORMAT_VERSION:
        raise NearDedupError(f"{label}: a format {model.format_version} report: a mixture "
                             f"re-derives its pairs, which this tool (format "
                             f"{FORMAT_VERSION}) cannot; run contamination again")
    config = NearDedupConfig.model_validate(model.config)
    rederive(view.path, model, config, packages, workers=workers)


def copy_report(src: Path, dest: Path, checksums_sha256: str) -> None:
    """Byte-identical copy of a verified report folder, re-verified at ``dest`` and pinned
    to the checksums file read when it was planned."""
    for rel in [*verify_checksums(src, "contamination report"), CHECKSUMS]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    verify_checksums(dest, "contamination report copy")
    if sha256_file(dest / CHECKSUMS) != checksums_sha256:
        raise NearDedupError(f"contamination report {src} changed while the mixture was built")
