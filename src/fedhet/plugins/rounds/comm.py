"""Communication accounting: the bytes sent up and down in each round and since the run began."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CommTotals:
    """Bytes sent up (uploads) and down (payloads and statistics) since the run began; checkpointed with the run.

    Example:
        >>> totals = CommTotals()
        >>> totals.add(up=10, down=4)["comm/bytes_up_total"]
        10.0
        >>> totals.add(up=5, down=4)["comm/bytes_down_total"]
        8.0

    """

    up: int = 0
    down: int = 0

    def add(self, up: int, down: int) -> dict[str, float]:
        """Count one round's bytes; returns its ``comm/*`` metrics (the round's bytes and the running totals)."""
        self.up += up
        self.down += down
        return {
            "comm/bytes_up": float(up),
            "comm/bytes_down": float(down),
            "comm/bytes_up_total": float(self.up),
            "comm/bytes_down_total": float(self.down),
        }

    def state_dict(self) -> dict[str, int]:
        """``{"up": ..., "down": ...}`` for the checkpoint."""
        return {"up": self.up, "down": self.down}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the totals of :meth:`state_dict`."""
        self.up, self.down = int(state["up"]), int(state["down"])
