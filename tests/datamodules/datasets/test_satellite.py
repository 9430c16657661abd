import gzip
from importlib import resources

import numpy as np
import pytest
import torch

from fedhet.datamodules import HybridFederation, SatelliteFederation
from fedhet.datamodules.datasets import BANDS, load_satellite
from fedhet.datamodules.datasets.satellite import CLASSES, band_columns, load_satellite_table
from fedhet.modules import FLIC, HyFEM
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting
from tests.trainer_options import trainer_options


def _header():
    raw = resources.files("fedhet.datamodules.datasets").joinpath("data", "satellite.csv.gz").read_bytes()
    return gzip.decompress(raw).split(b"\n", 1)[0].decode().split(",")


def test_table_shape_values_and_class_counts():
    x, y = load_satellite_table()
    assert tuple(x.shape) == (6435, 36)
    assert x.dtype == torch.float32
    assert x.min() >= 0
    assert x.max() <= 255
    assert torch.equal(x, x.round())
    # UCI: 4,435 training + 2,000 test rows; classes 1, 2, 3, 4, 5, 7 (6 "mixture" is empty)
    assert torch.bincount(y).tolist() == [1533, 703, 1358, 626, 707, 1508]
    assert CLASSES[2] == "grey soil"


def test_first_row_matches_the_uci_training_file():
    # UCI sat.trn, first line: 92 115 120 94 84 102 106 79 84 102 102 83 101 126 133 103 92 112 118 85 84 103 104 81
    # 102 126 134 104 88 121 128 100 84 107 113 87 3 (class 3 = grey soil)
    x, y = load_satellite_table()
    first = [92, 115, 120, 94, 84, 102, 106, 79, 84, 102, 102, 83, 101, 126, 133, 103, 92, 112, 118, 85, 84, 103]
    first += [104, 81, 102, 126, 134, 104, 88, 121, 128, 100, 84, 107, 113, 87]
    assert x[0].tolist() == first
    assert CLASSES[int(y[0])] == "grey soil"


@pytest.mark.parametrize("band", BANDS)
def test_band_columns_match_the_file_header(band):
    header = _header()
    assert [header[c] for c in band_columns(band)] == [f"p{p}_{band}" for p in range(9)]


def test_load_satellite_views_are_the_bands():
    data = load_satellite(["nir2", "green"])
    x, _ = load_satellite_table()
    assert data.view_widths == {"nir2": 9, "green": 9}
    torch.testing.assert_close(data.views["green"], x[:, [0, 4, 8, 12, 16, 20, 24, 28, 32]])
    with pytest.raises(ValueError, match="distinct bands"):
        load_satellite(["red", "red"])
    with pytest.raises(ValueError, match="unknown band"):
        band_columns("blue")


def test_default_federation_one_pair_of_bands_per_client():
    federation = SatelliteFederation(seed=1)
    specs = list(federation.specs.values())
    assert [s.client_id for s in specs] == [f"client_{i:03d}" for i in range(6)]
    pairs = {tuple(s.feature_blocks) for s in specs}
    assert len(pairs) == 6
    assert all(len(p) == 2 for p in pairs)
    assert all(s.input_dim == 18 and s.classes == tuple(range(6)) for s in specs)
    rows = [np.concatenate(list(parts.values())) for parts in federation.split_rows.values()]
    np.testing.assert_array_equal(np.sort(np.concatenate(rows)), np.arange(6435))  # disjoint, all rows used


def test_client_features_are_its_bands_standardised_with_its_training_part():
    federation = SatelliteFederation(client_bands=[["red", "nir1"], ["green"]], client_classes=[[0, 5], [1, 2, 3]])
    x, y = load_satellite_table()
    client = federation.client("client_000")
    train_rows = federation.split_rows["client_000"]["train"]
    assert set(y[train_rows].tolist()) == {0, 5}
    raw = x[train_rows][:, np.concatenate([band_columns("red"), band_columns("nir1")])]
    expected = (raw - raw.mean(0)) / raw.std(0, unbiased=False)
    torch.testing.assert_close(client.train_dataset.x, expected, atol=1e-4, rtol=1e-4)
    assert dict(client.spec.feature_blocks) == {"red": 9, "nir1": 9}
    assert federation.specs["client_001"].classes == (1, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"client_bands": []}, "client_bands"),
        ({"client_bands": [["green"], ["blue"]]}, r"client_bands\[1\]"),
        ({"client_bands": [["green"]], "client_classes": [[6]]}, r"client_classes\[0\]"),
        ({"client_bands": [["green"]], "client_classes": [[0], [1]]}, "lists 2 clients"),
        ({"test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SatelliteFederation(**kwargs)


def test_hybrid_federation_takes_the_bands_as_blocks():
    federation = HybridFederation(
        data="satellite",
        assignment={"a": {"blocks": ["green", "nir2"], "classes": [0, 1]}, "b": {"blocks": ["red"], "classes": [2]}},
    )
    assert federation.block_widths == {"green": 9, "red": 9, "nir2": 9}
    assert [s.input_dim for s in federation.specs.values()] == [18, 9]


def _trainer(tmp_path, name, **kwargs):
    return FederatedTrainer(
        **trainer_options(
            seed=0,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=0),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(tmp_path / name),
            **kwargs,
        )
    )


@pytest.mark.slow
def test_flic_runs_on_clients_with_different_bands(tmp_path):
    """FLIC-HL through the real engine on three clients in three feature spaces (9, 18 and 27 columns)."""
    data = SatelliteFederation(
        client_bands=[["green"], ["red", "nir1"], ["green", "nir1", "nir2"]],
        client_classes=[[0, 1, 2], [1, 2, 3], [3, 4, 5]],
        seed=0,
    )
    model = FLIC(variant="hl", network="mlp", pretrain_epochs=1)
    trainer = _trainer(tmp_path, "flic", rounds=3, local_epochs=1)
    trainer.fit(model, data)
    metrics = trainer.test(model, data)
    assert metrics["test/acc_mean"] > 0.5  # three classes per client: chance is 1/3


def test_hyfem_runs_on_band_blocks(tmp_path):
    data = HybridFederation(
        data="satellite",
        assignment={
            "a": {"blocks": ["green", "red"], "classes": [0, 1, 2]},
            "b": {"blocks": ["red", "nir1"], "classes": [3, 4, 5]},
        },
        standardize=True,
        seed=0,
    )
    model = HyFEM(extractor_dims=[16], hidden_dim=32, lr=0.1)
    trainer = _trainer(tmp_path, "hyfem", rounds=3, local_steps=16)
    trainer.fit(model, data)
    metrics = trainer.test(model, data)
    assert np.isfinite(metrics["test/acc_mean"])
    assert metrics["test/acc_mean"] > 1 / 6
