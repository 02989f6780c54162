"""Dagster asset graph of the near-dedup daily release (docs/contract.md §6).

One partition per release day: snapshot validation → index append → frozen scan report →
mixture build, with checks on the report and the mixture, a daily schedule and settings read
from the environment (`.env`, documented in `.env.example`). All the work is done by
`near_dedup_core`; this package only decides which day, which paths and in which order.
"""
