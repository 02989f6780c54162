"""Mixture plan, build and verify: a per-domain sample of snapshot packages, optionally
filtered by a frozen near-dedup report (docs/contract.md §5).

Config. A JSON object validated by `MixtureConfig` (unknown keys refused). Relative paths in
``inputs`` and ``near_dedup_report`` are relative to the current working directory, and are
recorded in the mixture exactly as written.

Pools. Samples of the *retained splits* are copied whole (but for those the report takes
down: a takedown applies in every split, docs/takedowns.md); every other split forms the
sampling pool (the report's "train pool"), and selected samples keep their split. The
report's inputs must be exactly the mixture's inputs (package ids and manifest sha256s, in
any order), else the report is stale and must be rescanned. With a report the retained splits are the report config's
``retained_splits`` (a mixture config may repeat them, but not differ); without a report they
are the config's optional ``retained_splits``, default ``["validation"]``.

Order of work (same with and without a report):
1. ``available_before_dedup``: pool samples per domain (the record's ``group_by`` field).
2. Drop the pool samples the report excludes → ``available_after_dedup`` (no report: equal).
3. Weights. ``fixed`` (and ``doremi``/``regmix``, which carry externally learned weights):
   w_i = weights[i] / Σ weights, domains not named get 0. ``temperature`` T:
   w_i ∝ n_i^(1/T) with n_i = available_after_dedup.
4. Quotas: ``target_records × w_i`` rounded by largest remainder (ties by domain name), so
   they sum to ``target_records`` exactly (computed on exact fractions of the float weights).
5. Quality: a sample is *eligible* when its compared text has at least ``quality.min_chars``
   characters (CPT ``text``; SFT ``"\\n".join(f"{role}: {content}")`` over ``messages``).
   A sample the report keeps is still subject to quota and quality.
6. Each domain takes ``min(quota, eligible)``. With ``redistribute`` the unmet remainder
   goes to domains with spare eligible samples and weight > 0, in proportion to their
   weights (largest remainder, capped by the spare), repeated until met or no spare is left.
   Row ``shortfall`` is the part of a domain's own quota its records could not fill;
   ``redistributed`` is the quota it received from others; the plan's total shortfall is
   ``target_records − Σ selected``. A total shortfall is an error unless ``allow_shortfall``.
7. Selection inside a domain: eligible samples ranked by
   ``sha256(f"{seed}:{package_id}:{sample_id}")``, the first ones taken — deterministic for a
   seed and independent of file order.

``plan.json`` (format ``mixture-plan``) holds the config's mixing parameters, the report
identity and one object per domain under ``domains`` (`PlanRow`: domain,
available_before_dedup, available_after_dedup, eligible, weight, quota, redistributed,
selected, shortfall), sorted by domain.

``doremi``/``regmix`` weights were learned on the undeduplicated pool, so they are refused
together with ``near_dedup_report``: applying them to the filtered pool would present old
weights as if learned on it.

Mixture package (``format: "mixture-package"``, ``format_version`` 1)::

    manifest.json        name, kind, inputs [{package_id, manifest_sha256, path}], strategy,
                         seed, target_records, group_by, quality, allow_shortfall,
                         redistribute, retained_splits, counts, near_dedup_report
                         ({path: "near-dedup", manifest_sha256} or null),
                         files [{path, split, records, sha256}], tool_version
    data/<split>/part-00000.jsonl
    plan.json            the plan (`Plan.to_json`)
    near-dedup/          byte-identical copy of the report (with a report only)
    checksums.sha256     over every other file, ``sha256sum -c`` format

A data line is the original record with refs resolved — the referenced record's fields,
then the ref record's own ``id`` and its own ``domain``/``source`` if present — plus
``"origin": {"package_id", "sample_id"}`` naming the sample itself; canonical JSON
(`fsutil.json_line`), in input package order then position in the package.

`verify_mixture` needs only the mixture folder: no input package and no SQLite index. It
checks the canonical checksums over plain files (the embedded report through
`report.verify_report`), manifest and plan with strict types, each data file against its
``files[]`` sha256 and record count, the plan recomputed from its own counts, and with a
report: inputs equal the report's inputs, every line's sample is a ``keep`` decision of its
split whose ``text_sha256`` the record's text matches (so no sample taken down remains),
retained splits are complete but for the samples taken down. A plain
mixture has no decisions to check its records against; its own counts are checked. What the
files can and cannot prove: docs/tamper.md.

Contamination. ``contamination_report`` names a frozen contamination report
(`near_dedup_core.contamination`) whose ``inputs`` must equal the mixture inputs like the
near-dedup report's; its pairs are re-derived from those inputs and the eval packages it
records before anything is dropped (`contamination.recheck_for_mixture`: a report with pairs
removed is refused). After the dedup drop (step 2), pool samples the report lists as containing an
eval item are removed too (plan field ``removed_contaminated``; ``available_after_dedup``
counts before this removal, weights use what is left); retained splits are untouched. The
built mixture holds a byte-identical copy under ``contamination/`` (manifest
``contamination_report``: {path, manifest_sha256}), and `verify_mixture` re-checks that
copy and that no selected line is a contaminated sample.

Layout, in pipeline order: `config` (the config file and its strategies), `inputs` (report
access, input matching, ref resolution), `allocation` (weights, quotas, selection rank),
`plan` (the pool pass and `plan_mixture`), `formats` (manifest.json and plan.json models),
`build` (`build_mixture`) and `verify` (`verify_mixture`). Every public name is re-exported
here, so callers import from ``near_dedup_core.mixture``.
"""

from near_dedup_core.mixture.allocation import (
    allocate,
    largest_remainder,
    sample_rank,
    strategy_weights,
)
from near_dedup_core.mixture.build import BuildResult, build_mixture
from near_dedup_core.mixture.config import (
    DEFAULT_RETAINED_SPLITS,
    FixedStrategy,
    LearnedStrategy,
    MixtureConfig,
    QualityFilter,
    Strategy,
    TemperatureStrategy,
    Weight,
    load_mixture_config,
)
from near_dedup_core.mixture.formats import (
    CONTAMINATION_DIR,
    FORMAT,
    FORMAT_VERSION,
    PLAN_FORMAT,
    REPORT_DIR,
    ContaminationRef,
    DataFile,
    InputRef,
    ManifestCounts,
    MixtureManifest,
    PlanContamination,
    PlanFile,
    PlanReport,
    PlanRow,
    PlanTotals,
    ReportRef,
)
from near_dedup_core.mixture.inputs import (
    REF_OWN_FIELDS,
    ReportView,
    SampleKey,
    check_inputs_match,
    read_report,
    resolve_ref,
)
from near_dedup_core.mixture.plan import Plan, plan_mixture, require_new_plan
from near_dedup_core.mixture.verify import VerifyResult, verify_mixture

__all__ = [
    "CONTAMINATION_DIR", "DEFAULT_RETAINED_SPLITS", "FORMAT", "FORMAT_VERSION", "PLAN_FORMAT",
    "REF_OWN_FIELDS", "REPORT_DIR",
    "BuildResult", "ContaminationRef", "DataFile", "FixedStrategy", "InputRef",
    "LearnedStrategy", "ManifestCounts", "MixtureConfig", "MixtureManifest", "Plan",
    "PlanContamination", "PlanFile", "PlanReport", "PlanRow", "PlanTotals", "QualityFilter",
    "ReportRef", "ReportView", "SampleKey", "Strategy", "TemperatureStrategy", "VerifyResult",
    "Weight",
    "allocate", "build_mixture", "check_inputs_match", "largest_remainder",
    "load_mixture_config", "plan_mixture", "read_report", "require_new_plan", "resolve_ref",
    "sample_rank", "strategy_weights", "verify_mixture",
]
