"""Small formatting helpers shared by the benchmark tables."""

from __future__ import annotations

import statistics


def percent_mean_std(values: list[float]) -> str:
    """Fractions as ``"mean ± std"`` in percent, one decimal (std 0 for one value)."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * std:.1f}"
