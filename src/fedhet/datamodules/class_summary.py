"""Each site's classes and their counts, said when a federation of the user's files is built, and the rare-class check.

A label typed wrongly in a few rows of one site (``2`` in a 0/1 column) silently adds a class to the whole
federation: every client's head grows by one output and the metrics change meaning. :func:`lone_rare_classes` finds a
class that appears at only one site, in under :data:`RARE_FRACTION` of that site's rows, so that the federation can
warn about it in one line before training.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

import numpy as np
from lightning.fabric.utilities.rank_zero import rank_zero_only

log = logging.getLogger(__name__)

RARE_FRACTION = 0.01
"""A class found at one site only, in fewer than this share of its rows, is warned about."""


def count_classes(labels: Mapping[str, np.ndarray], classes: Sequence[str]) -> dict[str, dict[str, int]]:
    """Each site's rows per class, the classes it holds only, in class-index order.

    Args:
        labels: each site's class indices (every row, all splits), by site.
        classes: each class index's label.

    Example:
        >>> count_classes({"a": np.array([0, 1, 1]), "b": np.array([1])}, ["no", "yes"])
        {'a': {'no': 1, 'yes': 2}, 'b': {'yes': 1}}

    """
    out = {}
    for site, y in labels.items():
        counts = np.bincount(y, minlength=len(classes))
        out[site] = {classes[k]: int(n) for k, n in enumerate(counts) if n}
    return out


def lone_rare_classes(counts: Mapping[str, Mapping[str, int]]) -> list[tuple[str, str, int, int]]:
    """The classes found at one site only, in fewer than :data:`RARE_FRACTION` of its rows.

    Args:
        counts: each site's rows per class (:func:`count_classes`).

    Returns:
        ``(class, site, rows of the class, rows of the site)`` for each such class, in site then class order.

    Example:
        >>> lone_rare_classes({"a": {"0": 500, "1": 495, "2": 5}, "b": {"0": 40, "1": 60}})
        [('2', 'a', 5, 1000)]

    """
    holders: dict[str, list[str]] = {}
    for site, per_class in counts.items():
        for label in per_class:
            holders.setdefault(label, []).append(site)
    rare = []
    for site, per_class in counts.items():
        rows = sum(per_class.values())
        for label, n in per_class.items():
            if holders[label] == [site] and n < RARE_FRACTION * rows:
                rare.append((label, site, n, rows))
    return rare


@rank_zero_only
def say_classes(owner: str, counts: Mapping[str, Mapping[str, int]], warn_rare: bool) -> None:
    """Print each site's classes with their counts (standard error), and warn in one line about each lone rare class.

    Args:
        owner: who speaks, e.g. ``"CSVFederation"``.
        counts: each site's rows per class (:func:`count_classes`).
        warn_rare: warn about :func:`lone_rare_classes` (off when the user declared the classes).

    """
    for site, per_class in counts.items():
        shown = ", ".join(f"{label!r}: {n:,}" for label, n in per_class.items())
        print(f"fedhet: {owner}: {site}: {sum(per_class.values()):,} rows, classes {{{shown}}}", file=sys.stderr)
    if not warn_rare:
        return
    for label, site, n, rows in lone_rare_classes(counts):
        log.warning(
            "%s: class %r appears only at %s, in %d of %d rows (%.1f %%): a mistyped label? Give `classes` to refuse"
            " labels outside them",
            owner,
            label,
            site,
            n,
            rows,
            100 * n / rows,
        )
