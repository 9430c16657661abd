"""Differential privacy in the engine: clipped uploads, calibrated noise on the aggregate and on statistics, the
accountant's epsilon per round, resume, configuration."""

import math
import sys

import pytest
import torch
from opacus.accountants import RDPAccountant

from fedhet.callbacks import FederatedCallback
from fedhet.callbacks.fedpac import CENTROIDS, COUNTS
from fedhet.cli import FederatedCLI
from fedhet.core import TensorSpec, UploadDeclaration
from fedhet.functional.privacy import clip_by_global_norm, global_l2_norm
from fedhet.modules import FedAvg, FedPAC, FedRep
from fedhet.plugins import FederatedTrainer, PrivateUpdate, Processes, Reporting, UniformSampler, UploadPrivacy
from tests.plugins.test_trainer import FailingFedAvg
from tests.trainer_options import trainer_options


def make_trainer(tmp_path, privacy, **kwargs):
    kwargs.setdefault("rounds", 3)
    return FederatedTrainer(
        **trainer_options(
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(tmp_path),
            server_update=privacy,
            **kwargs,
        )
    )


class Spy(FederatedCallback):
    """What the server sent, what clients produced, what the server received and what it computed, per round."""

    def __init__(self):
        self.sent, self.raw, self.received, self.result = {}, {}, {}, {}

    def on_round_start(self, trainer, round_idx):
        self.sent[round_idx] = {k: v.clone() for k, v in trainer.server_state.shared.items()}

    def on_client_fit_end(self, round_idx, client_id, update):
        self.raw[(round_idx, client_id)] = update

    def on_aggregate_start(self, round_idx, updates):
        self.received[round_idx] = updates

    def on_aggregate_end(self, round_idx, server_state):
        self.result[round_idx] = {k: v.clone() for k, v in server_state.shared.items()}


def test_uploads_are_clipped_updates_and_the_aggregate_is_their_sum_plus_calibrated_noise(tmp_path, tiny_federation):
    clip, z = 0.05, 0.5
    spy = Spy()
    trainer = make_trainer(tmp_path, UploadPrivacy(clip_norm=clip, noise_multiplier=z), callbacks=[spy])
    trainer.fit(FailingFedAvg(raise_for=["b"], hidden_dims=[64]), tiny_federation)  # 'b' fails: 3 uploads, m = 4
    residuals = []
    for r in range(3):
        sent, updates = spy.sent[r], spy.received[r]
        assert [u.client_id for u in updates] == ["a", "c", "d"]
        deltas = []
        for u in updates:
            delta = {name: u.shared[name] - sent[name] for name in u.shared}
            raw = {name: spy.raw[(r, u.client_id)].shared[name] - sent[name] for name in u.shared}
            expected, raw_norm = clip_by_global_norm(raw, clip)
            assert raw_norm > clip, "the test needs updates larger than the clipping norm"
            assert float(global_l2_norm(delta)) == pytest.approx(clip, rel=1e-4)
            for name in delta:
                torch.testing.assert_close(delta[name], expected[name], rtol=1e-4, atol=1e-6)
            deltas.append(delta)
        for name, value in spy.result[r].items():
            mean_part = sent[name] + sum(d[name] for d in deltas) / 4  # divided by the 4 sampled clients
            residuals.append((value - mean_part).double().flatten())
    noise = torch.cat(residuals)
    std = z * clip / 4
    assert abs(float(noise.mean())) < 5 * std / math.sqrt(len(noise))
    assert float(noise.std()) == pytest.approx(std, abs=5 * std / math.sqrt(2 * len(noise)))


def test_epsilon_per_round_is_the_accountants_and_grows(tmp_path, tiny_federation):
    z, delta = 1.3, 1e-4
    sampler = UniformSampler(fraction=0.5, full_last_round=True)
    trainer = make_trainer(tmp_path, UploadPrivacy(0.5, z, delta=delta), rounds=4, sampler=sampler)
    trainer.fit(FedRep(hidden_dims=[8], head_epochs=1), tiny_federation)
    epsilons = [m["privacy/epsilon"] for m in trainer.history]
    assert all(a < b for a, b in zip(epsilons, epsilons[1:], strict=False))
    accountant = RDPAccountant()
    for rate, eps in zip([0.5, 0.5, 0.5, 1.0], epsilons, strict=True):
        accountant.step(noise_multiplier=z, sample_rate=rate)
        assert eps == pytest.approx(accountant.get_epsilon(delta=delta), rel=1e-12)


def test_more_noise_spends_less_epsilon(tmp_path, tiny_federation):
    final = {}
    for z in (0.8, 1.6, 3.2):
        trainer = make_trainer(tmp_path / str(z), UploadPrivacy(0.5, z), rounds=2)
        trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
        final[z] = trainer.history[-1]["privacy/epsilon"]
    assert final[0.8] > final[1.6] > final[3.2] > 0


def test_statistics_are_clipped_and_noised_per_client_and_accounted(tmp_path, tiny_federation, caplog):
    clip_s, z_s, z = 0.3, 2.0, 1.0
    spy = Spy()
    privacy = UploadPrivacy(
        1.0,
        z,
        statistics=[CENTROIDS],
        statistics_clip_norm=clip_s,
        statistics_noise_multiplier=z_s,
        public_statistics=[COUNTS],  # declared public: uploaded raw, outside epsilon
    )
    trainer = make_trainer(tmp_path, privacy, rounds=2, callbacks=[spy])
    module = FedPAC(hidden_dims=[64], head_epochs=1, classifier_collaboration=False)
    trainer.fit(module, tiny_federation)
    residuals = []
    for (r, cid), raw in spy.raw.items():
        (sent,) = [u for u in spy.received[r] if u.client_id == cid]
        assert torch.equal(sent.statistics[COUNTS], raw.statistics[COUNTS])  # not covered: sent as it is
        expected, _ = clip_by_global_norm({CENTROIDS: raw.statistics[CENTROIDS]}, clip_s)
        residuals.append((sent.statistics[CENTROIDS] - expected[CENTROIDS]).double().flatten())
    noise = torch.cat(residuals)
    assert float(noise.std()) == pytest.approx(z_s * clip_s, abs=5 * z_s * clip_s / math.sqrt(2 * len(noise)))
    assert f"['{COUNTS}'] leave the clients without clipping or noise" in caplog.text
    accountant = RDPAccountant()
    for _ in range(2):
        accountant.step(noise_multiplier=z, sample_rate=1.0)
        accountant.step(noise_multiplier=z_s, sample_rate=1.0)
    assert trainer.history[-1]["privacy/epsilon"] == pytest.approx(accountant.get_epsilon(delta=1e-5))


def test_integer_statistics_cannot_be_noised(tmp_path, tiny_federation):
    class CountingFedAvg(FedAvg):
        def client_statistics(self):
            return {"seen": torch.tensor([self.spec.num_train])}

        def upload_declaration(self, spec):
            return UploadDeclaration({"seen": TensorSpec((1,), torch.int64)})

    privacy = UploadPrivacy(1.0, 1.0, statistics=["seen"], statistics_clip_norm=1.0, statistics_noise_multiplier=1)
    with pytest.raises(ValueError, match="client 'a': statistic 'seen' has dtype torch.int64"):
        make_trainer(tmp_path, privacy).fit(CountingFedAvg(hidden_dims=[8]), tiny_federation)


def _comparable(history):
    return [{k: v for k, v in m.items() if not k.startswith("time/")} for m in history]


@pytest.mark.kernels
def test_private_runs_are_reproducible_and_resume_exactly(tmp_path, tiny_federation):
    def private():
        return UploadPrivacy(0.2, 1.1)

    full = make_trainer(tmp_path / "full", private(), rounds=4)
    full.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    again = make_trainer(tmp_path / "again", private(), rounds=4)
    again.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert _comparable(again.history) == _comparable(full.history)

    make_trainer(tmp_path / "split", private(), rounds=2).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    resumed = make_trainer(tmp_path / "split", private(), rounds=4)
    resumed.fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert _comparable(resumed.history) == _comparable(full.history)
    with pytest.raises(ValueError, match="written with field 'privacy'"):
        make_trainer(tmp_path / "split", None, rounds=5).fit(FedAvg(hidden_dims=[8]), tiny_federation, "last")


def test_bad_privacy_settings_are_refused(tmp_path):
    for kwargs, field in [
        ({"clip_norm": 0.0, "noise_multiplier": 1.0}, "clip_norm"),
        ({"clip_norm": 1.0, "noise_multiplier": 0.0}, "noise_multiplier"),
        ({"clip_norm": 1.0, "noise_multiplier": 1.0, "delta": 1.0}, "delta"),
        ({"clip_norm": 1.0, "noise_multiplier": 1.0, "statistics": ["*"]}, "statistics_clip_norm"),
    ]:
        with pytest.raises(ValueError, match=field):
            UploadPrivacy(**kwargs)


def test_privacy_is_configurable_from_yaml(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    config = tmp_path / "private.yaml"
    config.write_text(
        "trainer:\n  server_update:\n    class_path: fedhet.plugins.UploadPrivacy\n"
        "    init_args: {clip_norm: 0.5, noise_multiplier: 1.2, delta: 1.0e-6}\n"
    )
    cli = FederatedCLI(args=["-c", "configs/fedavg/digits.yaml", "-c", str(config)], run=False)
    update = cli.trainer.server_update
    assert isinstance(update, PrivateUpdate)
    assert update.seed == cli.trainer.seed  # the shorthand takes the run's seed
    privacy = update.privacy
    assert (privacy.clip_norm, privacy.noise_multiplier, privacy.delta) == (0.5, 1.2, 1e-6)


def test_statistics_neither_covered_nor_declared_public_are_refused_before_anything_is_used(tmp_path, tiny_federation):
    privacy = UploadPrivacy(1.0, 1.0)  # no 'statistics' patterns: FedPAC's centroids, counts and heads uncovered
    trainer = make_trainer(tmp_path, privacy)
    with pytest.raises(ValueError, match=r"client 'a': statistics \[.*centroids.*\] would leave the client") as err:
        trainer.fit(FedPAC(hidden_dims=[8], head_epochs=1), tiny_federation)
    assert "'public_statistics'" in str(err.value)
    assert trainer.history == []  # no round was aggregated or logged: no epsilon was reported
    assert not list(tmp_path.glob("version_*/checkpoints"))

    public = UploadPrivacy(1.0, 1.0, public_statistics=["*"])  # the user's explicit choice: all public
    trainer = make_trainer(tmp_path / "public", public, rounds=1)
    trainer.fit(FedPAC(hidden_dims=[8], head_epochs=1), tiny_federation)
    assert trainer.history[-1]["privacy/epsilon"] > 0
