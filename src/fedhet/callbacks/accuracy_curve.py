"""A run's accuracy against round as a PNG in its run folder, written when training ends (no W&B needed)."""

from __future__ import annotations

from typing import Any

from fedhet.core.hooks import FederationHooks


class AccuracyCurve(FederationHooks):
    """Write ``plots/accuracy.png``: the mean, sample-weighted and worst-client validation accuracy against round.

    The ``fedhet`` command adds it to every run (matplotlib's Agg backend, once, at the end of training); a run whose
    rounds logged no ``val/<metric>_mean`` (no validation split), with ``trainer.reporting.accuracy_plot`` off (a
    suite's runs: the suite draws its own plots), or without matplotlib, writes nothing.

    Args:
        metric: the metric family drawn (``val/<metric>_mean``, ``_weighted``, ``_worst``).

    """

    def __init__(self, metric: str = "acc") -> None:
        self.metric = metric

    def on_federation_end(self, trainer: Any) -> None:
        """Draw the curves from ``trainer.history`` into the run folder's ``plots/accuracy.png``."""
        keys = [f"val/{self.metric}_{kind}" for kind in ("mean", "weighted", "worst")]
        if not trainer.reporting.accuracy_plot:
            return
        if not trainer.is_global_zero or not any(keys[0] in row for row in trainer.history):
            return
        try:
            import matplotlib
        except ImportError:
            return
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for key in keys:
            points = [(row.get("round", i), row[key]) for i, row in enumerate(trainer.history) if key in row]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
        ax.set(xlabel="round", ylabel=f"validation {self.metric}", title="validation accuracy against round")
        ax.legend()
        folder = trainer.run.plots
        folder.mkdir(parents=True, exist_ok=True)
        fig.savefig(folder / "accuracy.png", dpi=100, bbox_inches="tight")
        plt.close(fig)
