from __future__ import annotations

import pytest
import torch

from fedhet.datamodules import LinearMappingToy, NoisyFeaturesToy

SMALL = {"num_clients": 8, "samples_per_class": 24, "test_samples_per_class": 12}


@pytest.fixture(scope="module")
def noisy() -> NoisyFeaturesToy:
    toy = NoisyFeaturesToy(**SMALL, seed=3)
    toy.setup()
    return toy


@pytest.fixture(scope="module")
def linear() -> LinearMappingToy:
    toy = LinearMappingToy(**SMALL, imbalance="none", seed=3)
    toy.setup()
    return toy


@pytest.mark.parametrize("name", ["noisy", "linear"])
def test_every_client_holds_three_classes_in_train_and_test(name, request):
    toy = request.getfixturevalue(name)
    assert toy.client_ids == [f"client_{i:03d}" for i in range(8)]
    assert toy.num_classes == 20
    for client_id, client in toy.clients.items():
        classes = toy.client_classes[client_id]
        assert len(classes) == 3
        assert client.spec.classes == classes
        assert tuple(torch.unique(client.test_dataset.y).tolist()) == classes
        assert client.train_dataset.x.dtype == torch.float32
        assert client.test_dataset.x.shape[1:] == client.train_dataset.x.shape[1:]
    assert toy.class_means.shape == (20, 5)


def test_noisy_toy_appends_one_to_ten_noise_features_per_client(noisy):
    dims = set()
    for client_id, spec in noisy.specs.items():
        added = noisy.feature_draws[client_id]
        assert 1 <= added <= 10
        assert spec.input_shape == (5 + added,)
        dims.add(spec.input_dim)
    assert len(dims) > 1, "clients live in different feature spaces"


def test_linear_toy_maps_the_base_space_through_each_clients_matrix(linear):
    dims = set()
    for client_id, client in linear.clients.items():
        matrix = linear.feature_draws[client_id]
        assert matrix.shape[0] == 5
        assert 3 <= matrix.shape[1] <= 100
        assert client.spec.input_dim == matrix.shape[1]
        dims.add(matrix.shape[1])
        x = torch.cat([client.train_dataset.x, client.test_dataset.x]).double()
        base = torch.linalg.lstsq(matrix.double().T, x.T).solution.T  # x = base @ L has an exact solution
        torch.testing.assert_close(base @ matrix.double(), x, atol=1e-3, rtol=1e-4)
    assert len(dims) > 1


def test_pools_are_shared_out_exactly_without_imbalance(linear):
    specs = linear.specs.values()
    assert sum(spec.num_train for spec in specs) == 20 * 24  # 8 clients x 3 classes >= 20: every class is held
    assert sum(spec.num_test for spec in specs) == 20 * 12


def test_imbalance_keeps_a_share_of_each_class(noisy):
    for client in noisy.clients.values():
        counts = torch.bincount(client.train_dataset.y, minlength=20)
        assert int((counts > 0).sum()) == 3
    assert sum(spec.num_train for spec in noisy.specs.values()) < 20 * 24
    code = NoisyFeaturesToy(**SMALL, imbalance="code", seed=3)
    assert all(len(spec.classes) == 3 for spec in code.specs.values())


def test_same_seed_same_data_other_seed_differs():
    first, again, other = (LinearMappingToy(num_clients=4, samples_per_class=6, seed=s) for s in (1, 1, 2))
    for client_id in first.client_ids:
        torch.testing.assert_close(first.client(client_id).train_dataset.x, again.client(client_id).train_dataset.x)
        torch.testing.assert_close(first.client(client_id).test_dataset.y, again.client(client_id).test_dataset.y)
    assert not torch.equal(first.class_means, other.class_means)


def test_options_reach_the_clients():
    toy = NoisyFeaturesToy(
        num_clients=3,
        samples_per_class=10,
        test_samples_per_class=4,
        num_classes=4,
        classes_per_client=2,
        base_dim=2,
        min_added=4,
        max_added=4,
        val_fraction=0.2,
        batch_size=7,
        imbalance="none",
    )
    assert toy.hparams.num_clients == 3
    client = toy.client("client_002")
    assert client.spec.input_shape == (6,)
    assert len(client.spec.classes) <= 2
    assert client.batch_size == 7
    assert client.spec.num_val > 0


@pytest.mark.parametrize(
    ("cls", "kwargs", "argument"),
    [
        (NoisyFeaturesToy, {"num_clients": 0}, "num_clients"),
        (NoisyFeaturesToy, {"samples_per_class": 0}, "samples_per_class"),
        (NoisyFeaturesToy, {"classes_per_client": 21}, "classes_per_client"),
        (NoisyFeaturesToy, {"imbalance": "some"}, "imbalance"),
        (NoisyFeaturesToy, {"max_added": 0}, "max_added"),
        (NoisyFeaturesToy, {"noise_std": -1.0}, "noise_std"),
        (NoisyFeaturesToy, {"val_fraction": 1.0}, "val_fraction"),
        (LinearMappingToy, {"min_dim": 0}, "min_dim"),
        (LinearMappingToy, {"max_dim": 2}, "max_dim"),
        (LinearMappingToy, {"map_std": 0.0}, "map_std"),
        (LinearMappingToy, {"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_are_refused_on_construction(cls, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        cls(**kwargs)


def test_default_imbalance_gives_the_sizes_the_paper_reports():
    # Rakotomamonjy et al. (2024), S3.1.1: 100 clients with 2 classes each hold about 15k (linear) to 16k (noisy)
    # training samples, at most 400 per client; the code's subsampling (the default) gives that, the uniform
    # share the paper's text states gives about a third more
    sizes = {}
    for imbalance in ("code", "paper"):
        toy = LinearMappingToy(
            num_clients=100, classes_per_client=2, test_samples_per_class=1, imbalance=imbalance, seed=0
        )
        sizes[imbalance] = [spec.num_train for spec in toy.specs.values()]
    assert LinearMappingToy().hparams.imbalance == NoisyFeaturesToy().hparams.imbalance == "code"
    assert 13_000 <= sum(sizes["code"]) <= 17_000
    assert max(sizes["code"]) <= 400
    assert sum(sizes["paper"]) > 18_000
