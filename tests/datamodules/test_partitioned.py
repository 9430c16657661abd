from __future__ import annotations

import numpy as np
import pytest
import torch

from fedhet.datamodules import DigitsFederation, PartitionedFederation
from fedhet.functional import dominant_class_sets


def _pool(n_per_class: int = 30, num_classes: int = 5, dim: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_classes).repeat_interleave(n_per_class)
    return torch.randn(len(y), dim, generator=g), y


def _all(client, field: str) -> torch.Tensor:
    return torch.cat(
        [getattr(client.train_dataset, field), getattr(client.val_dataset, field), getattr(client.test_dataset, field)]
    )


def test_digits_federation_is_a_partitioned_federation():
    kwargs = {"val_fraction": 0.1, "test_fraction": 0.2, "seed": 3}
    digits = DigitsFederation(num_clients=4, alpha=0.5, min_samples=10, **kwargs)
    same = PartitionedFederation("digits", 4, "dirichlet", {"alpha": 0.5, "min_samples": 10}, **kwargs)
    assert same.client_ids == digits.client_ids
    for client_id in digits.client_ids:
        np.testing.assert_array_equal(same.source_indices[client_id], digits.source_indices[client_id])
        for part in ("train_dataset", "val_dataset", "test_dataset"):
            torch.testing.assert_close(
                getattr(same.client(client_id), part).x, getattr(digits.client(client_id), part).x
            )
            torch.testing.assert_close(
                getattr(same.client(client_id), part).y, getattr(digits.client(client_id), part).y
            )


def test_shards_with_linear_maps_give_clients_their_classes_and_dimensions():
    federation = PartitionedFederation(
        _pool(),
        num_clients=5,
        partition="shards",
        partition_args={"classes_per_client": 2},
        feature_transform="linear_map",
        transform_args={"min_dim": 3, "max_dim": 30},
        test_fraction=0.0,
        seed=1,
    )
    dims = set()
    for client_id, spec in federation.specs.items():
        matrix = federation.feature_draws[client_id]
        assert spec.input_shape == (matrix.shape[1],)
        assert 3 <= spec.input_dim <= 30
        assert len(spec.classes) == 2
        dims.add(spec.input_dim)
    assert len(dims) > 1
    x, _ = _pool()
    client = federation.client("client_000")
    rows = torch.from_numpy(federation.source_indices["client_000"])
    torch.testing.assert_close(client.train_dataset.x, x[rows] @ federation.feature_draws["client_000"])
    assert federation.unheld_indices.size == 0


@pytest.mark.parametrize(
    ("transform", "args", "expected_dims"),
    [
        ("noise_features", {"min_added": 2, "max_added": 2}, {18}),
        ("prune", {"fraction": 0.25}, {12}),
        ("prune", {"fraction": 0.25, "up_to": True, "permute": True}, None),
    ],
)
def test_feature_transforms_reach_every_client(transform, args, expected_dims):
    federation = PartitionedFederation(_pool(), 4, feature_transform=transform, transform_args=args, seed=0)
    dims = {spec.input_dim for spec in federation.specs.values()}
    if expected_dims is not None:
        assert dims == expected_dims
    else:
        assert all(12 <= d <= 16 for d in dims)
    if transform == "prune":
        x, _ = _pool()
        for client_id, client in federation.clients.items():
            rows = torch.from_numpy(federation.source_indices[client_id])
            kept = federation.feature_draws[client_id]
            torch.testing.assert_close(
                torch.sort(_all(client, "x"), dim=0).values, torch.sort(x[rows][:, kept], dim=0).values
            )


def test_resampling_images_gives_half_the_clients_each_resolution():
    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(40) % 4
    federation = PartitionedFederation((x, y), 4, feature_transform="resample", transform_args={"sizes": [8, 4]})
    shapes = sorted(spec.input_shape for spec in federation.specs.values())
    assert shapes == [(1, 4, 4), (1, 4, 4), (1, 8, 8), (1, 8, 8)]
    flat = PartitionedFederation(
        (x.flatten(1), y),
        4,
        feature_transform="resample",
        transform_args={"sizes": [[8, 8], [4, 4]], "image_shape": [8, 8], "mode": "area"},
    )
    assert sorted(spec.input_dim for spec in flat.specs.values()) == [16, 16, 64, 64]


def test_dominant_partition_counts_survive_into_the_clients():
    x, y = _pool(n_per_class=80, num_classes=10, dim=4)
    federation = PartitionedFederation(
        (x, y), 10, "dominant", {"samples_per_client": 50, "uniform_fraction": 0.2}, test_fraction=0.2, seed=2
    )
    for index, client in enumerate(federation.clients.values()):
        histogram = torch.bincount(_all(client, "y"), minlength=10)
        dominant = list(dominant_class_sets(10)[index % 5])
        assert int(histogram.sum()) == 50
        assert histogram[dominant].tolist() == [14, 14, 15]  # 1 uniform each, then 40 dominant: 13, 13 and 14
        assert int(histogram.sum() - histogram[dominant].sum()) == 7
        assert client.spec.num_test == 10
    assert len(federation.unheld_indices) == 800 - 500


def test_quantity_skew_and_iid_sizes():
    x, y = _pool()
    skewed = PartitionedFederation((x, y), 5, "quantity", {"min_samples": 8, "distribution": "dirichlet", "alpha": 0.5})
    sizes = [len(rows) for rows in skewed.source_indices.values()]
    assert sum(sizes) == 150
    assert min(sizes) >= 8
    iid = PartitionedFederation((x, y), 4)
    assert sorted(len(rows) for rows in iid.source_indices.values()) == [37, 37, 38, 38]


def test_concept_shift_permutes_each_groups_labels():
    x, y = _pool()
    federation = PartitionedFederation((x, y), 6, concept_shift_groups=3, test_fraction=0.0, seed=4)
    permutations = federation.label_permutations
    assert permutations.shape == (3, 5)
    assert not np.array_equal(permutations[0], permutations[1])
    for index, (client_id, client) in enumerate(federation.clients.items()):
        rows = federation.source_indices[client_id]
        expected = permutations[index % 3][y.numpy()[rows]]
        np.testing.assert_array_equal(client.train_dataset.y.numpy(), expected)


def test_hybrid_partition_from_a_grid_builds_block_clients():
    x = torch.rand(50, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(50) % 5
    table = {
        "left": {"blocks": [0, 2], "classes": [0, 1, 2]},
        "right": {"blocks": [1, 3], "classes": [2, 3]},
        "top": {"blocks": [0, 1], "classes": [0, 3]},
    }
    federation = PartitionedFederation(
        (x, y), None, "hybrid", {"assignment": table, "grid": [2, 2]}, test_fraction=0.0, seed=0
    )
    assert federation.client_ids == ["left", "right", "top"]
    spec = federation.specs["right"]
    assert spec.feature_blocks == {"1": 4, "3": 4}
    assert spec.input_shape == (8,)
    assert spec.classes == (2, 3)
    flat = x.flatten(1)
    rows = torch.from_numpy(federation.source_indices["right"])
    torch.testing.assert_close(federation.client("right").train_dataset.x, flat[rows][:, [2, 3, 6, 7, 10, 11, 14, 15]])
    np.testing.assert_array_equal(federation.unheld_indices, np.flatnonzero(y.numpy() == 4))


def test_hybrid_partition_with_explicit_columns_and_loader_path():
    table = {"a": {"blocks": ["first"], "classes": [0, 1]}, "b": {"blocks": ["first", "second"], "classes": [1]}}
    federation = PartitionedFederation(
        "fedhet.datamodules.partitioned:load_digits_pool",
        2,
        "hybrid",
        {"assignment": table, "block_columns": {"first": list(range(32)), "second": list(range(32, 64))}},
    )
    assert federation.specs["a"].input_dim == 32
    assert federation.specs["b"].feature_blocks == {"first": 32, "second": 32}


def test_loader_callables_and_their_arguments():
    calls = []

    def loader(scale: float = 1.0):
        calls.append(scale)
        x, y = _pool()
        return x.numpy() * scale, y.numpy()

    federation = PartitionedFederation(loader, 2, data_args={"scale": 2.0})
    assert federation.num_clients == 2
    assert calls == [2.0]
    assert federation.client("client_000").train_dataset.x.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"partition": "nope"}, "partition"),
        ({"partition": "dirichlet"}, "partition_args"),
        ({"partition": "dirichlet", "partition_args": {"alpha": 1.0, "alhpa": 1.0}}, "partition_args"),
        ({"partition_args": {"alpha": 1.0}}, "partition_args"),
        ({"feature_transform": "rotate"}, "feature_transform"),
        ({"transform_args": {"fraction": 0.1}}, "transform_args"),
        ({"feature_transform": "prune", "transform_args": {"seed": 1}}, "transform_args"),
        ({"feature_transform": "resample", "transform_args": {}}, "transform_args"),
        ({"feature_transform": "resample", "transform_args": {"sizes": [4], "size": 2}}, "transform_args"),
        (
            {"partition": "hybrid", "partition_args": {"assignment": {}}, "feature_transform": "prune"},
            "feature_transform",
        ),
        ({"num_clients": 0}, "num_clients"),
        ({"num_clients": None}, "num_clients"),
        ({"concept_shift_groups": -1}, "concept_shift_groups"),
        ({"num_classes": 0}, "num_classes"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "test_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"data": "mnist"}, "data"),
        ({"data": "no_such_module:loader"}, "data"),
        ({"data": 3}, "data"),
        ({"data_args": {"as_images": True}}, "data_args"),
    ],
)
def test_bad_arguments_are_refused_on_construction(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        PartitionedFederation(**({"data": _pool()} | kwargs))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"data": (torch.rand(4, 2), torch.rand(4))}, "data"),
        ({"data": (torch.rand(4, 2), torch.zeros(3, dtype=torch.int64))}, "data"),
        ({"partition": "shards", "partition_args": {"classes_per_client": 9}}, "classes_per_client"),
        (
            {
                "partition": "hybrid",
                "num_clients": 3,
                "partition_args": {"assignment": {"a": {"blocks": ["x"], "classes": [0]}}, "block_columns": {"x": [0]}},
            },
            "num_clients",
        ),
    ],
)
def test_bad_data_or_partitions_are_refused_when_the_clients_are_built(kwargs, argument):
    federation = PartitionedFederation(**({"data": _pool(), "num_clients": 2} | kwargs))
    with pytest.raises(ValueError, match=argument):
        federation.setup()
