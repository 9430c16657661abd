"""The synthetic Covertype fixture: 400 rows in the UCI ``covtype.data`` layout, made by :func:`make_rows`.

Regenerate ``covtype_sample.data`` with ``python -m tests.datamodules.datasets.covtype_fixture``. The values are
random draws within the real columns' ranges; they are not real observations.
"""

from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).with_name("covtype_sample.data")

# rows per wilderness area (Rawah, Neota, Comanche Peak, Cache la Poudre) and the cover types (1..7) each one has
AREA_ROWS = (120, 60, 140, 80)
AREA_COVER_TYPES = ((1, 2, 5, 7), (1, 2, 7), (1, 2, 3, 5, 6, 7), (2, 3, 4, 6))
QUANTITATIVE_RANGES = (
    (1859, 3858),  # elevation (m)
    (0, 360),  # aspect (degrees)
    (0, 66),  # slope (degrees)
    (0, 1397),  # horizontal distance to hydrology (m)
    (-173, 601),  # vertical distance to hydrology (m)
    (0, 7117),  # horizontal distance to roadways (m)
    (0, 254),  # hillshade 9am
    (0, 254),  # hillshade noon
    (0, 254),  # hillshade 3pm
    (0, 7173),  # horizontal distance to fire points (m)
)


def make_rows(seed: int = 0) -> np.ndarray:
    """Random rows with the UCI schema: 10 quantitative, 4 wilderness and 40 soil indicators, cover type."""
    rng = np.random.default_rng(seed)
    blocks = []
    for area, (count, covers) in enumerate(zip(AREA_ROWS, AREA_COVER_TYPES, strict=True)):
        rows = np.zeros((count, 55), dtype=np.int64)
        for column, (low, high) in enumerate(QUANTITATIVE_RANGES):
            rows[:, column] = rng.integers(low, high + 1, count)
        rows[:, 10 + area] = 1
        rows[np.arange(count), 14 + rng.integers(0, 40, count)] = 1
        rows[:, 54] = rng.choice(covers, count)
        blocks.append(rows)
    table = np.concatenate(blocks)
    return table[rng.permutation(len(table))]


if __name__ == "__main__":
    np.savetxt(FIXTURE, make_rows(), fmt="%d", delimiter=",")
