"""Mixture stages 3–7, the arithmetic: normalized strategy weights, quotas by largest
remainder, allocation with optional redistribution, and the seeded selection rank. Pure
functions of counts, shared by planning and by `verify_mixture`'s recomputation."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

from near_dedup_core.mixture.config import (
    FixedStrategy,
    LearnedStrategy,
    MixtureConfig,
    TemperatureStrategy,
)


def strategy_weights(cfg: "MixtureConfig | FixedStrategy | TemperatureStrategy | LearnedStrategy",
                     available: dict[str, int]) -> dict[str, float]:
    """Normalized weight per domain (every domain of ``available`` and of fixed weights), for
    a config or its strategy alone (as recorded in plan.json)."""
    strategy = cfg.strategy if isinstance(cfg, MixtureConfig) else cfg
    if isinstance(strategy, TemperatureStrategy):
        raw = {d: (n ** (1.0 / strategy.temperature) if n > 0 else 0.0)
               for d, n in available.items()}
    else:
        raw = {d: 0.0 for d in available}
        raw.update(strategy.weights)
    total = math.fsum(raw.values())
    if total <= 0:
        return {d: 0.0 for d in raw}
    return {d: w / total for d, w in raw.items()}


def largest_remainder(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights`` into integers summing to ``total``.

    Each domain gets ``floor(total × w / Σw)``; the remaining units go to the largest
    fractional parts (ties by domain name). Exact arithmetic on the float weights, so the
    result does not depend on summation order. All-zero weights give all zeros.
    """
    exact = {d: Fraction(w) for d, w in weights.items() if w > 0}
    out = {d: 0 for d in weights}
    weight_sum = sum(exact.values())
    if not exact or total <= 0:
        return out
    shares = {d: total * w / weight_sum for d, w in exact.items()}
    for d, s in shares.items():
        out[d] = math.floor(s)
    left = total - sum(out.values())
    for d in sorted(shares, key=lambda d: (-(shares[d] - out[d]), d))[:left]:
        out[d] += 1
    return out


def allocate(target: int, weights: dict[str, float], eligible: dict[str, int],
             redistribute: bool) -> tuple[dict[str, int], dict[str, int]]:
    """Return (quota, selected) per domain; see the package docstring, steps 4 and 6."""
    quota = largest_remainder(target, weights)
    selected = {d: min(quota[d], eligible.get(d, 0)) for d in weights}
    unmet = target - sum(selected.values())
    while redistribute and unmet > 0:
        spare = {d: eligible.get(d, 0) - selected[d] for d in weights
                 if weights[d] > 0 and eligible.get(d, 0) > selected[d]}
        if not spare:
            break
        share = largest_remainder(unmet, {d: weights[d] for d in spare})
        for d, n in share.items():
            give = min(n, spare[d])
            selected[d] += give
            unmet -= give
    return quota, selected


def sample_rank(seed: int, package_id: str, sample_id: str) -> bytes:
    """Selection order inside a domain: lower ranks are taken first."""
    return hashlib.sha256(f"{seed}:{package_id}:{sample_id}".encode()).digest()
