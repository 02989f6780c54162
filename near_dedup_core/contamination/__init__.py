"""`near-dedup contamination`: which training samples contain evaluation items, exactly, in
a frozen report.

A sample is contaminated by an item when the item's hashed character shingles are contained
in one nearly contiguous span of the sample's at or above ``contamination_threshold``, or a
short item's words occur in it as one run; a prefix filter finds every such
pair without estimating one (docs/contamination.md explains the filter, the work and the
report). The modules, in the order the command runs them:

- `items`: eval packages opened, every record an item;
- `probe`: the anchor table over the items, and what the workers run per training text;
- `kernels`: the prefix filter's arithmetic and the compiled kernels;
- `exact`: items shorter than the containment method's reach, found by their words;
- `dispatch`: where the probe runs (``--executor``: the local pool or Ray);
- `run`: the command (`contamination_report`);
- `report`: the report's files, one typed model each, and the summary recomputed from the pairs;
- `setaside`: text common in the pool, and the allowlist;
- `verify`: `report verify`, and what a mixture reads from a verified report;
- `audit`: `report explain` and `report diff` of contamination reports.
"""

from near_dedup_core.contamination.items import EvalItem, SampleRef, open_evals, read_items
from near_dedup_core.contamination.kernels import (
    EXTRA_HITS,
    containment,
    least_overlap,
    matched_span,
    prefix_plan,
    widen,
)
from near_dedup_core.contamination.probe import build_state, training_sample, warm_up
from near_dedup_core.contamination.report import FILES, FORMAT, FORMAT_VERSION
from near_dedup_core.contamination.run import ContaminationResult, contamination_report
from near_dedup_core.contamination.verify import (
    ContaminationSummary,
    ContaminationView,
    copy_report,
    is_contamination_report,
    pair_lines,
    read_contamination,
    recheck_for_mixture,
    rederive,
    verify_contamination,
)

__all__ = [
    "EXTRA_HITS", "FILES", "FORMAT", "FORMAT_VERSION", "ContaminationResult",
    "ContaminationSummary", "ContaminationView", "EvalItem", "SampleRef", "build_state",
    "containment", "contamination_report", "copy_report", "is_contamination_report",
    "least_overlap", "matched_span", "open_evals", "pair_lines", "prefix_plan", "read_contamination",
    "read_items", "recheck_for_mixture", "rederive", "training_sample", "verify_contamination", "warm_up", "widen",
]
