"""The federation dashboard: W&B content read back from the offline run file, and the PNGs in the run folder."""

import json

import pytest
import torch
from PIL import Image

wandb = pytest.importorskip("wandb")
pytest.importorskip("matplotlib")
from lightning.pytorch.loggers import WandbLogger  # noqa: E402

from fedhet.callbacks import AnchorUpdate, FederatedCallback, ModelMatching  # noqa: E402
from fedhet.callbacks.dashboard import FederationDashboard, client_rows  # noqa: E402
from fedhet.callbacks.figures import new_figure  # noqa: E402
from fedhet.callbacks.flic import embedded_samples  # noqa: E402
from fedhet.datamodules import HybridFederation, RotatedBlobsDomains  # noqa: E402
from fedhet.modules import FLIC, FedAvg, FedDaDiL, FedPAC, HyFEM  # noqa: E402
from fedhet.plugins import FederatedTrainer  # noqa: E402
from fedhet.plugins.rounds.options import Processes, Reporting  # noqa: E402
from tests.integrations.test_wandb import finished_run_records, history  # noqa: E402
from tests.integrations.test_wandb import offline_wandb as offline_wandb  # noqa: E402  (a fixture)
from tests.trainer_options import trainer_options  # noqa: E402


def trainer(root, rounds=2, **kwargs):
    kwargs.setdefault("callbacks", [FederationDashboard()])
    kwargs.update(accelerator="cpu", enable_progress_bar=False, default_root_dir=root)
    return FederatedTrainer(**trainer_options(rounds=rounds, **kwargs))


def png(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert min(image.size) > 100
        return image.size


def test_client_rows_hold_each_clients_metrics(tiny_federation):
    tiny_federation.setup()
    metrics = {"val/acc/a": 0.5, "val/loss/a": 1.0, "val/acc/c": 0.75, "val/loss/c": 0.5, "val/acc_mean": 0.625}
    columns, rows = client_rows("val", metrics, tiny_federation.specs)
    assert columns == ["client", "samples", "classes", "acc", "loss"]
    spec = tiny_federation.specs["a"]
    assert rows == [["a", spec.num_val, 2, 0.5, 1.0], ["c", tiny_federation.specs["c"].num_val, 3, 0.75, 0.5]]


def test_wandb_gets_tables_histograms_figures_and_the_checkpoint(offline_wandb, tmp_path, tiny_federation):
    logger = WandbLogger(save_dir=str(offline_wandb), offline=True, project="fedhet-test")
    run = FederatedTrainer(
        rounds=2,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        default_root_dir=tmp_path / "run",
        logger=logger,
    )  # a WandbLogger brings the dashboard by itself
    run.fit(FedPAC(hidden_dims=[8]), tiny_federation)
    tested = run.test(FedPAC(hidden_dims=[8]), tiny_federation)
    assert any(isinstance(cb, FederationDashboard) for cb in run.callbacks)
    run_dir = logger.experiment.dir
    wandb.finish()

    records = finished_run_records(offline_wandb)
    rows = history(records)
    tables = [row for row in rows if "val/clients/_type" in row]
    assert [row["trainer/global_step"] for row in tables] == [0, 1]  # in the rows of the rounds' metrics
    assert all(row["val/clients/_type"] == "table-file" for row in tables)
    assert all("val/acc_mean" in row for row in tables)
    histograms = [row["val/acc_histogram/values"] for row in rows if "val/acc_histogram/values" in row]
    assert len(histograms) == 2
    assert sum(histograms[-1]) == 4  # one count per client
    (figure_row,) = [row for row in rows if "figures/fedpac_head_mixing/_type" in row]
    assert figure_row["figures/fedpac_head_mixing/_type"] == "image-file"
    (test_row,) = [row for row in rows if "test/clients/path" in row]
    assert test_row["test/acc_mean"] == tested["test/acc_mean"]
    with open(f"{run_dir}/{test_row['test/clients/path']}") as f:
        table = json.load(f)
    assert table["columns"][:3] == ["client", "samples", "classes"]
    acc = table["columns"].index("acc")
    assert {row[0]: row[acc] for row in table["data"]} == {c: tested[f"test/acc/{c}"] for c in "abcd"}
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    (model,) = [a for a in artifacts if a.type == "model"]  # the tables travel as "run_table" artifacts
    assert [entry.path for entry in model.manifest.contents] == ["last.ckpt"]
    assert set(model.aliases) >= {"latest", "round-2"}

    plots = tmp_path / "run" / "version_0" / "plots"
    for name in ("val_acc_clients", "communication", "fedpac_head_mixing"):
        png(plots / f"{name}.png")
    png(plots / "test_acc_clients.png")  # the same trainer tests in its own run folder


def test_flic_anchors_picture(tmp_path, tiny_federation):
    small = {"latent_dim": 8, "embedding_hidden_dims": [16], "hidden_width": 12, "pretrain_epochs": 1}
    run = trainer(tmp_path)
    run.fit(FLIC(**small, variant="hl"), tiny_federation)
    png(run.run_dir / "plots" / "flic_anchors.png")
    (anchor_update,) = [cb for cb in run.callbacks if isinstance(cb, AnchorUpdate)]
    points, labels = embedded_samples(run, anchor_update.picture_clients, anchor_update.picture_samples)
    assert points.shape == (sum(min(100, s.num_train) for s in tiny_federation.specs.values()), 8)
    assert set(labels.tolist()) == {0, 1, 2}
    assert not (run.run_dir / "plots" / "fedpac_head_mixing.png").exists()


def test_feddadil_atoms_picture(tmp_path):
    run = trainer(tmp_path)
    run.fit(FedDaDiL(num_atoms=2, atom_size=6, batch_size=8, target="theta45", barycenter_iters=3),
            RotatedBlobsDomains(batch_size=16, samples_per_class=24))  # fmt: skip
    assert png(run.run_dir / "plots" / "feddadil_atoms.png")[0] > png(run.run_dir / "plots" / "communication.png")[1]


def test_hyfem_objective_picture(tmp_path):
    table = {"a": {"blocks": ["v0", "v1"], "classes": [0, 1]}, "b": {"blocks": ["v1", "v2"], "classes": [1, 2, 3]}}
    data_args = {"num_classes": 4, "num_views": 3, "samples_per_class": 40, "latent_dim": 12, "view_latent_dim": 6}
    run = trainer(tmp_path, rounds=3, local_steps=4)
    run.fit(HyFEM(extractor_dims=[5], hidden_dim=6), HybridFederation("synthetic", table, data_args=data_args, seed=0))
    (matching,) = [cb for cb in run.callbacks if isinstance(cb, ModelMatching)]
    assert [r for r, _ in matching.objective_history] == [0, 1, 2]
    assert all(torch.isfinite(torch.tensor(v)) for _, v in matching.objective_history)
    png(run.run_dir / "plots" / "hyfem_matching_objective.png")


def test_no_wandb_no_figures_without_the_callback(tmp_path, tiny_federation):
    run = trainer(tmp_path, callbacks=[])
    run.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert not (run.run_dir / "plots").exists()


class Pictured(FederatedCallback):
    """A callback of no method the dashboard knows, offering one picture of the round it is asked about."""

    def figures(self, trainer, round_idx):
        figure = new_figure()
        figure.add_subplot().set_title(f"round {round_idx + 1}")
        return {"my_picture": figure}


def test_the_dashboard_draws_what_any_callback_offers(tmp_path, tiny_federation):
    run = trainer(tmp_path, callbacks=[FederationDashboard(), Pictured()])
    run.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    png(run.run_dir / "plots" / "my_picture.png")
