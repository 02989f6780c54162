"""Audit tools over frozen reports: explain one decision, diff two reports, exclusion rates.

They read report files and the input packages named in a report's manifest, never the index.
"""

from near_dedup_core.audit.diff import ReportDiff, diff_reports
from near_dedup_core.audit.explain import Explanation, explain_sample
from near_dedup_core.audit.rates import (
                                         DEFAULT_MAX_EXCLUSION_RATE,
                                         DEFAULT_MAX_RATE_JUMP,
                                         RateProblem,
                                         ReportCounts,
                                         count_report,
                                         rate_problems,
)

__all__ = ["DEFAULT_MAX_EXCLUSION_RATE", "DEFAULT_MAX_RATE_JUMP", "Explanation", "RateProblem",
           "ReportCounts", "ReportDiff", "count_report", "diff_reports", "explain_sample",
           "rate_problems"]
