"""Benchmarks of near-dedup against its peers and at scale (not tests: nothing here runs under
pytest). Run each as ``python -m bench.<name>`` from the repository root; docs/benchmarks.md
lists the commands and the figures they produced."""
