"""Near-dedup daily release: a persistent index (SQLite, PostgreSQL or Apache Iceberg), frozen
near-duplicate reports, contamination reports, mixtures."""

__version__ = "0.1.0"

#: Bumped whenever normalization, shingling, hashing, banding or decision rules change in a way
#: that changes stored index rows or report contents. An index is bound to the version it was
#: created with.
ALGORITHM_VERSION = "nd-3"
