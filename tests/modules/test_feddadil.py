"""FedDaDiL's module: what leaves a client, private coordinates, the target's labels, step-1 encoder, plain Trainer."""

import math

import lightning
import pytest
import torch

from fedhet.callbacks import DictionaryAveraging, FederatedCallback
from fedhet.callbacks.feddadil import ATOM_NAMES, GLOBAL_NAMES
from fedhet.datamodules import RotatedBlobsDomains
from fedhet.modules import FedAvg, FedDaDiL
from fedhet.plugins import FederatedTrainer
from tests.conftest import make_client, plain_trainer
from tests.trainer_options import trainer_options

K, N, D, C = 2, 16, 2, 2
TARGET = "theta45"


class Uploads(FederatedCallback):
    def __init__(self):
        self.rounds = {}

    def on_aggregate_start(self, round_idx, updates):
        self.rounds[round_idx] = updates


def toy(**kwargs):
    kwargs.setdefault("samples_per_class", 24)
    return RotatedBlobsDomains(batch_size=16, **kwargs)


def dadil(**kwargs):
    settings = {"num_atoms": K, "atom_size": N, "batch_size": 8, "target": TARGET, "barycenter_iters": 3}
    return FedDaDiL(**{**settings, **kwargs})


def fit(tmp_path, model, data, rounds=2, **kwargs):
    settings = {"accelerator": "cpu", "enable_progress_bar": False, "logger": False, "checkpoint_every": 0}
    trainer = FederatedTrainer(
        **trainer_options(rounds=rounds, default_root_dir=str(tmp_path), **{**settings, **kwargs})
    )
    trainer.fit(model, data)
    return trainer


def on_simplex(x):
    return bool((x >= -1e-7).all()) and torch.allclose(x.sum(-1), torch.ones(x.shape[:-1]), atol=1e-5)


def test_uploads_are_the_atoms_only_and_coordinates_stay_private(tmp_path):
    spy = Uploads()
    trainer = fit(tmp_path, dadil(), toy(), callbacks=[spy])
    atom_bytes = K * N * (D + C) * 4
    for round_idx, updates in spy.rounds.items():
        assert [u.client_id for u in updates] == ["theta0", "theta15", "theta30", TARGET]
        for update in updates:
            assert update.shared == {}
            assert set(update.statistics) == set(ATOM_NAMES)
            assert update.statistics[ATOM_NAMES[0]].shape == (K, N, D)
            assert update.statistics[ATOM_NAMES[1]].shape == (K, N, C)
            assert update.num_bytes == atom_bytes
            alpha = trainer.store[update.client_id].personal["coordinates"]
            assert not any(
                t.numel() == alpha.numel() and torch.equal(t.flatten(), alpha) for t in update.statistics.values()
            )
        assert trainer.history[round_idx]["comm/bytes_up"] == 4 * atom_bytes
    assert trainer.history[1]["comm/bytes_down"] == 4 * atom_bytes  # the global dictionary, once per client
    coordinates = {cid: state.personal["coordinates"] for cid, state in trainer.store.items()}
    for alpha in coordinates.values():
        assert on_simplex(alpha)
    assert len({tuple(a.tolist()) for a in coordinates.values()}) == 4  # each client fitted its own
    assert on_simplex(trainer.server_state.statistics[GLOBAL_NAMES[1]])  # averaged label rows stay probabilities


def test_target_labels_never_reach_training(tmp_path):
    """Relabelling the target's training data changes nothing but its evaluation."""
    runs = []
    for permute in (False, True):
        data = toy()
        data.setup()
        if permute:
            target = data.client(TARGET).train_dataset
            target.y.copy_(1 - target.y)
        spy = Uploads()
        fit(tmp_path / str(permute), dadil(), data, rounds=1, callbacks=[spy])
        runs.append(spy.rounds[0])
    for left, right in zip(*runs, strict=True):
        for name in ATOM_NAMES:
            torch.testing.assert_close(left.statistics[name], right.statistics[name], rtol=0, atol=0)


def test_loss_decreases_and_the_target_is_labelled(tmp_path):
    model = dadil(atom_size=32, batch_size=16, lr=0.3)
    trainer = fit(tmp_path, model, toy(samples_per_class=48), rounds=8, log_per_client=True)
    losses = [row["train/loss_mean"] for row in trainer.history]
    assert losses[-1] < 0.7 * losses[0]
    test = trainer.test(model, toy(samples_per_class=48))
    assert test[f"test/acc_r/{TARGET}"] > 0.8
    assert test[f"test/acc_e/{TARGET}"] > 0.8


@pytest.mark.parametrize("rule", ["weighted", "random"])
def test_softmax_parametrisation_and_other_rules_run(tmp_path, rule):
    model = dadil(parametrisation="softmax", aggregation=rule, solver="sinkhorn")
    trainer = fit(tmp_path, model, toy())
    callback = next(cb for cb in trainer.callbacks if isinstance(cb, DictionaryAveraging))
    assert callback.rule == rule
    for state in trainer.store.values():
        assert on_simplex(torch.softmax(state.personal["coordinates"], 0))
    assert math.isfinite(trainer.history[-1]["train/loss_mean"])


def test_step1_encoder_and_head_are_loaded_from_a_fedavg_checkpoint(tmp_path):
    sources = toy(include_target=False)
    step1 = FedAvg(hidden_dims=[8], lr=0.1)
    trainer = fit(tmp_path / "step1", step1, sources, rounds=2, checkpoint_every=1)
    baseline = trainer.test(step1, sources)
    checkpoint = tmp_path / "step1" / "version_0" / "checkpoints" / "last.ckpt"
    model = dadil(hidden_dims=[8], encoder_checkpoint=str(checkpoint))
    step2 = fit(tmp_path / "step2", model, toy(), rounds=1, log_per_client=True)
    after = step2.test(model, toy())
    for cid in ("theta0", "theta15", "theta30"):  # the step-1 model, unchanged, on the same test split
        assert after[f"test/acc_source_only/{cid}"] == pytest.approx(baseline[f"test/acc/{cid}"])
    body = {k: v for k, v in trainer.server_state.shared.items() if k.startswith("body.")}
    personal = step2.store[TARGET].personal
    for name, value in body.items():
        torch.testing.assert_close(personal[name], value)  # the encoder stayed frozen
    baseline_model = dadil(hidden_dims=[8], encoder_checkpoint=str(checkpoint), labelling="source_only")
    baseline_run = fit(tmp_path / "baseline", baseline_model, toy(), rounds=1, log_per_client=True)
    scored = baseline_run.test(baseline_model, toy())
    for cid in ("theta0", "theta15", "theta30", TARGET):  # the baseline's row: the step-1 model is its acc
        assert scored[f"test/acc/{cid}"] == pytest.approx(after[f"test/acc_source_only/{cid}"])
    assert scored["test/target_acc_mean"] == pytest.approx(after[f"test/acc_source_only/{TARGET}"])


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="encoder_checkpoint"):
        FedDaDiL(hidden_dims=[8])
    with pytest.raises(ValueError, match="labelling"):
        FedDaDiL(labelling="x")
    with pytest.raises(ValueError, match="num_atoms"):
        FedDaDiL(num_atoms=0)
    without_head = dadil(labelling="source_only")  # no step-1 checkpoint: no head to report
    without_head.setup_client(toy().specs["theta0"])
    with pytest.raises(ValueError, match="'labelling' is 'source_only'"):
        without_head.configure_model()


def test_runs_under_a_plain_lightning_trainer():
    lightning.seed_everything(0, verbose=False)
    dm = make_client("solo", 120, 0, dim=5, val_fraction=0.2, test_fraction=0.2)
    module = FedDaDiL(num_atoms=2, atom_size=30, batch_size=15, lr=0.3, barycenter_iters=3)
    trainer = plain_trainer(epochs=3)
    trainer.fit(module, dm)
    assert on_simplex(module.alpha().detach())
    assert on_simplex(module.atom_probabilities().detach())
    (results,) = trainer.test(module, dm, verbose=False)
    assert set(results) == {"test/acc", "test/acc_e", "test/acc_r", "test/source_acc"}  # a labelled client
    assert results["test/acc_r"] > 0.5


def built(**kwargs):
    data = toy()
    model = dadil(**{"num_atoms": 3, **kwargs})
    model.setup_client(data.specs["theta0"])
    model.configure_model()
    return model


def test_default_step_is_the_papers_projected_gradient_step():
    """Alg. 2: alpha <- proj(alpha - eta grad). Constant gradient (28, 30, 30), 50 steps of eta = 0.002: the closed
    form 1/3 - 50 eta (g - mean g) = (7/15, 4/15, 4/15) (see tests/functional/test_dictionary_steps.py)."""
    model = built(lr=0.002)
    optimizer = model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.SGD)
    for _ in range(50):
        optimizer.zero_grad(set_to_none=True)
        model.coordinates.grad = torch.tensor([28.0, 30.0, 30.0])
        optimizer.step()
    torch.testing.assert_close(model.alpha().detach(), torch.tensor([7 / 15, 4 / 15, 4 / 15]))


def test_atom_mini_batches_are_contiguous_and_class_balanced(tmp_path, monkeypatch):
    import fedhet.modules.feddadil as module

    calls = []

    def spy(z, atoms_z, atoms_y, *args, **kwargs):
        calls.append((atoms_z.detach().clone(), atoms_y.detach().clone()))
        return module_loss(z, atoms_z, atoms_y, *args, **kwargs)

    module_loss = module.dictionary_loss
    monkeypatch.setattr(module, "dictionary_loss", spy)
    model = dadil(num_atoms=2, atom_size=16, batch_size=8, lr=0.01)
    fit(tmp_path, model, toy(), rounds=1)
    initial, _ = module.init_dictionary(2, 16, D, C, torch.Generator().manual_seed(0))
    assert len(calls) == 4 * 2  # 4 clients, ceil(16 / 8) batches each
    torch.testing.assert_close(calls[0][0], initial[:, :8])  # the first client's first batch: indices 0..7
    torch.testing.assert_close(calls[1][0], initial[:, 8:])  # then 8..15 (a step only moves the batch's rows)
    for _, labels in calls:
        for atom in labels.argmax(-1):  # (8,) classes of one atom's batch
            assert atom.bincount(minlength=C).tolist() == [8 // C] * C


def test_adam_state_is_kept_across_rounds_only_when_asked(tmp_path):
    for keep in (False, True):
        model = dadil(optimizer="adam", lr=0.05, keep_optimizer_state=keep)
        trainer = fit(tmp_path / str(keep), model, toy(), rounds=2)
        for state in trainer.store.values():
            if not keep:
                assert state.optimizer is None
                continue
            steps = [float(s["step"]) for s in state.optimizer["state"].values()]
            assert len(steps) >= 2  # atom features and coordinates (the target's labels get no gradient)
            assert set(steps) == {2 * math.ceil(N / 8)}  # two rounds of ceil(n / n_b) steps each


def test_coordinates_leave_uniform_and_the_target_differs_from_the_sources(tmp_path):
    model = dadil(atom_size=32, batch_size=16, lr=0.3, log_coordinates=True)
    data = toy(samples_per_class=48)
    trainer = fit(tmp_path, model, data, rounds=4, log_per_client=True)
    test = trainer.test(model, data)
    alphas = {cid: torch.tensor([test[f"test/alpha_{k}/{cid}"] for k in range(K)]) for cid in data.client_ids}
    for cid, alpha in alphas.items():
        assert on_simplex(alpha)
        assert (alpha - 1 / K).abs().sum() > 0.05, cid  # moved away from uniform
    source_mean = torch.stack([a for cid, a in alphas.items() if cid != TARGET]).mean(0)
    assert (alphas[TARGET] - source_mean).abs().sum() > 0.05
