"""Domain adaptation's tuning criterion (``val/source_acc_mean``) never reads the target's labels; its result does."""

import pytest

from fedhet.datamodules import RotatedBlobsDomains
from fedhet.experiments.tuning import SOURCE_VALIDATION_METRIC, objective_value
from fedhet.modules import FedDaDiL
from fedhet.plugins import FederatedTrainer
from tests.trainer_options import trainer_options

TARGET = "theta45"
SOURCES = ("theta0", "theta15", "theta30")


class CorruptedTarget(RotatedBlobsDomains):
    """The same domains, with every label of the target (train, validation and test rows) changed."""

    def domains(self):
        domains = super().domains()
        x, y = domains[TARGET]
        domains[TARGET] = (x, 1 - y)
        return domains


def history(tmp_path, data_class):
    data = data_class(samples_per_class=24, batch_size=16, val_fraction=0.25, test_fraction=0.25, seed=1)
    model = FedDaDiL(num_atoms=2, atom_size=16, batch_size=8, target=TARGET, barycenter_iters=3)
    trainer = FederatedTrainer(**trainer_options(
        rounds=2, default_root_dir=str(tmp_path), accelerator="cpu", enable_progress_bar=False, logger=False,
        checkpoint_every=0, log_per_client=True,
    ))  # fmt: skip
    trainer.fit(model, data)
    return trainer.history


def test_the_source_criterion_is_the_same_whatever_the_target_labels(tmp_path):
    clean = history(tmp_path / "clean", RotatedBlobsDomains)
    corrupted = history(tmp_path / "corrupted", CorruptedTarget)
    assert corrupted[-1][f"val/acc/{TARGET}"] != clean[-1][f"val/acc/{TARGET}"]  # the target's labels did change
    for metrics in (clean[-1], corrupted[-1]):
        assert f"val/source_acc/{TARGET}" not in metrics
        sources = [metrics[f"val/source_acc/{cid}"] for cid in SOURCES]
        assert sources == [metrics[f"val/acc/{cid}"] for cid in SOURCES]
        assert metrics[SOURCE_VALIDATION_METRIC] == pytest.approx(sum(sources) / len(sources))
        assert [f"val/target_acc/{cid}" in metrics for cid in SOURCES] == [False] * len(SOURCES)
        assert metrics["val/target_acc_mean"] == metrics[f"val/acc/{TARGET}"]  # the result: the target's alone
    assert objective_value(clean, SOURCE_VALIDATION_METRIC) == objective_value(corrupted, SOURCE_VALIDATION_METRIC)
