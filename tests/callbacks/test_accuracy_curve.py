"""The accuracy curve every ``fedhet fit`` writes into its run folder."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np

from fedhet.cli import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "fedavg" / "digits.yaml"


def test_fit_writes_accuracy_png(tmp_path: Path) -> None:
    main(
        [
            "fit",
            "-c",
            str(CONFIG),
            "--trainer.rounds=2",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.reporting.progress_bar=false",
        ]
    )
    image = matplotlib.image.imread(tmp_path / "version_0" / "plots" / "accuracy.png")
    assert image.shape[0] > 100
    assert image.shape[1] > 100
    assert np.unique(image.reshape(-1, image.shape[-1]), axis=0).shape[0] > 10  # curves drawn, not a blank page


def test_accuracy_plot_off_writes_no_png(tmp_path: Path) -> None:
    """``reporting.accuracy_plot=false`` (what a suite's runs pass) draws nothing; the run itself completes."""
    main(
        [
            "fit",
            "-c",
            str(CONFIG),
            "--trainer.rounds=1",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.reporting.progress_bar=false",
            "--trainer.reporting.accuracy_plot=false",
        ]
    )
    assert (tmp_path / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "version_0" / "plots" / "accuracy.png").exists()
