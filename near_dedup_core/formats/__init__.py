"""The strict base of every typed on-disk format (reports, mixtures): pydantic models with
strict JSON types, unknown keys refused, frozen once read.

Validators are built on first use (``defer_build``), not at import: commands that import a
format's module for its constants (e.g. `scan`) never pay for building them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of the format models: ``strict=True, extra="forbid"``, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)
