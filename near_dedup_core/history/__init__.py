"""Questions asked of the index's history: `index find` (`find`) says, for a text, a package's
sample or a hash, every indexed content that is that text or a near copy of it, every sample
each was ingested from (package, split, scope, batch and date) and, given the shipped
mixtures, which of them contained it (docs/provenance.md).

The modules: `queries` (the queries, read and checked), `find` (the join on one snapshot),
`verify` (the exact-Jaccard task its workers run), `mixtures` (the shipped mixtures' samples,
imported only when mixtures are asked about: it reads the mixture package's formats).
"""

from near_dedup_core.history.find import FindResult, find_texts, index_config
from near_dedup_core.history.queries import (
    Query,
    hash_query,
    jsonl_queries,
    sample_queries,
    text_query,
)

__all__ = ["FindResult", "Query", "find_texts", "hash_query", "index_config",
           "jsonl_queries", "sample_queries", "text_query"]
