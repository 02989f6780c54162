"""`scan`: freeze the near-dedup report of one input pool, reading the index only.

Stages, each producing what the next one needs:

1. **pool** — the input packages' samples and their contents, loaded from the index (every
   input must be indexed with the same manifest; the data files are re-hashed against it).
   A *node* is one content within one split: only nodes of the same split and scope are
   ever compared, and all samples of a node are exact duplicates of each other.
2. **candidates** — LSH: nodes sharing a band key within one (scope, split) group, plus
   indexed history contents sharing a band key (looked up in the index's band table). Texts
   under ``min_chars`` have no band keys: they match exactly only. A node with more than
   ``max_candidates`` candidates stops the scan (exit 2).
3. **filters** — two cheap bounds that provably keep recall: the set-size ratio
   (``J ≤ min(|A|,|B|) / max(|A|,|B|)``) and signature agreement: a pair at exactly the
   threshold agrees on a position with probability ``t``, so agreement below
   ``min_agreement`` (the ``1e-6`` quantile of Binomial(num_perm, t)) is dropped; pairs
   with higher true Jaccard are dropped even less often.
4. **verify** — exact Jaccard of the hashed shingle sets, recomputed from the normalized texts
   stored in the index, in parallel workers; pairs at or above the threshold are relations;
   the numeric/unit guard marks those it keeps apart (``blocked_by``).
5. **decide** — greedy in first-ingest order: a node is excluded only by a direct, unblocked
   match with an earlier kept node (no transitivity); history matches never exclude.
6. **write** — the report folder (decisions, relations, origins, manifest, checksums), staged
   and renamed; the format is defined in `near_dedup_core.report`.

One module per stage: `pool`, `candidates`, `verify`, `decide`, `write`; `records` holds the
named records passed between them and `run` the entry point `scan_pool`. The names below
are re-exported for callers; a module constant such as `VERIFY_CHUNK` is read in its stage's
module (`scan.verify.VERIFY_CHUNK`), so that is where to change it.
"""

from near_dedup_core.scan.candidates import find_candidates, min_agreement
from near_dedup_core.scan.pool import build_nodes, decision_order, load_pool
from near_dedup_core.scan.records import (
    Candidates,
    Decisions,
    Matches,
    Nodes,
    Pool,
    Samples,
    Verified,
)
from near_dedup_core.scan.run import ScanResult, scan_pool
from near_dedup_core.scan.verify import VERIFY_CHUNK, verify_pairs

__all__ = [
    "VERIFY_CHUNK", "Candidates", "Decisions", "Matches", "Nodes", "Pool", "Samples",
    "ScanResult", "Verified", "build_nodes", "decision_order",
    "find_candidates", "load_pool", "min_agreement", "scan_pool", "verify_pairs",
]
