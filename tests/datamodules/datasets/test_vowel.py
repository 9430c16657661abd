import numpy as np
import pytest
import torch

from fedhet.datamodules import VowelFederation
from fedhet.datamodules.datasets import VOWELS, load_vowel
from fedhet.modules import FedAvg, LocalOnly
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting


@pytest.fixture(scope="module")
def vowel():
    return load_vowel()


def test_shapes_and_balance(vowel):
    assert tuple(vowel.x.shape) == (990, 9)
    assert vowel.x.dtype == torch.float32
    assert vowel.y.dtype == torch.int64
    assert torch.bincount(vowel.speaker).tolist() == [66] * 15
    assert torch.bincount(vowel.y).tolist() == [90] * 11
    assert torch.bincount(vowel.repetition).tolist() == [165] * 6
    # every (speaker, repetition) pair says each vowel exactly once
    keys = vowel.speaker * 6 + vowel.repetition
    for key in range(90):
        assert sorted(vowel.y[keys == key].tolist()) == list(range(11))


def test_first_utterance_matches_the_uci_file_without_its_second_ratio(vowel):
    # UCI vowel-context.data, first line: speaker 0 says "hid": -3.639 0.418 -0.670 1.779 -0.168 1.627 -0.388 0.529
    # -0.874 -0.814 (ten log-area ratios); mlbench's copy drops the second one (0.418).
    expected = [-3.639, -0.670, 1.779, -0.168, 1.627, -0.388, 0.529, -0.874, -0.814]
    np.testing.assert_allclose(vowel.x[0].numpy(), expected, atol=1e-6)
    assert VOWELS[int(vowel.y[0])] == "hid"
    assert VOWELS == ("hid", "hId", "hEd", "hAd", "hYd", "had", "hOd", "hod", "hUd", "hud", "hed")


def test_one_client_per_speaker_split_by_repetition(vowel):
    federation = VowelFederation(seed=3)
    assert federation.client_ids == [f"speaker_{s:02d}" for s in range(15)]
    for speaker, client in enumerate(federation.clients.values()):
        spec = client.spec
        assert (spec.input_dim, spec.num_train, spec.num_val, spec.num_test) == (9, 44, 0, 22)
        assert spec.classes == tuple(range(11))
        assert torch.bincount(client.test_dataset.y, minlength=11).tolist() == [2] * 11
        test_reps, val_reps = federation.held_out_repetitions(speaker)
        assert len(test_reps) == 2
        assert val_reps == ()
        # the test rows are exactly the speaker's held-out repetitions, the training rows the other four
        mine = vowel.speaker == speaker
        held = mine & torch.isin(vowel.repetition, torch.tensor(test_reps))
        torch.testing.assert_close(client.test_dataset.x, vowel.x[held])
        torch.testing.assert_close(client.train_dataset.x, vowel.x[mine & ~held])


def test_seed_draws_the_held_out_repetitions():
    first, again, other = VowelFederation(seed=0), VowelFederation(seed=0), VowelFederation(seed=1)
    draws = [[f.held_out_repetitions(s) for s in range(15)] for f in (first, again, other)]
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]
    assert len({reps for reps, _ in draws[0]}) > 1  # speakers do not all hold out the same repetitions


def test_validation_repetitions_and_speaker_subset():
    federation = VowelFederation(speakers=[4, 9], test_repetitions=1, val_repetitions=2)
    assert federation.declared_num_clients == 2
    specs = list(federation.specs.values())
    assert [s.client_id for s in specs] == ["speaker_04", "speaker_09"]
    assert [(s.num_train, s.num_val, s.num_test) for s in specs] == [(33, 22, 11)] * 2
    test_reps, val_reps = federation.held_out_repetitions(4)
    assert not set(test_reps) & set(val_reps)


def test_standardize_uses_the_client_training_part():
    client = VowelFederation(speakers=[7], standardize=True).client("speaker_07")
    x = client.train_dataset.x
    torch.testing.assert_close(x.mean(0), torch.zeros(9), atol=1e-5, rtol=0)
    torch.testing.assert_close(x.std(0, unbiased=False), torch.ones(9), atol=1e-5, rtol=0)
    assert client.test_dataset.x.mean(0).abs().max() > 1e-3  # test rows use the training statistics


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"speakers": [15]}, "speakers"),
        ({"speakers": [1, 1]}, "speakers"),
        ({"speakers": []}, "speakers"),
        ({"test_repetitions": 0}, "test_repetitions"),
        ({"test_repetitions": 6}, "test_repetitions"),
        ({"test_repetitions": 3, "val_repetitions": 3}, "val_repetitions"),
        ({"val_repetitions": -1}, "val_repetitions"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        VowelFederation(**kwargs)


def test_federated_loop_learns_vowels_on_three_speakers(tmp_path):
    """The real engine on three speakers: Local and FedAvg both end far above chance (1/11) on held-out repetitions."""
    for module in (LocalOnly(hidden_dims=[32], lr=0.05, momentum=0.5), FedAvg(hidden_dims=[32], lr=0.05, momentum=0.5)):
        trainer = FederatedTrainer(
            rounds=8,
            local_epochs=5,
            seed=0,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=0),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(tmp_path / type(module).__name__),
        )
        data = VowelFederation(speakers=[0, 5, 10], seed=0)
        trainer.fit(module, data)
        metrics = trainer.test(module, data)
        assert metrics["test/acc_mean"] > 0.3
