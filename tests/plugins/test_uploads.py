"""What leaves a client, for every method in the package: one row of CASES per method (add yours)."""

import pytest
import torch

from fedhet.callbacks.feddadil import ATOM_NAMES
from fedhet.callbacks.fedhenn import KERNEL
from fedhet.callbacks.fedpac import CENTROIDS, COUNTS, HEAD_H, HEAD_V
from fedhet.callbacks.flic import ANCHOR_MEANS
from fedhet.callbacks.hyfem import STAT_PREFIX
from fedhet.core import TensorSpec, UploadDeclaration
from fedhet.datamodules import ClientDataModule, FederatedDataModule, HybridFederation, RotatedBlobsDomains
from fedhet.modules import (
    FLIC,
    FedAvg,
    FedBABU,
    FedDaDiL,
    FedHeNN,
    FedPAC,
    FedPer,
    FedProx,
    FedRep,
    GlobalLayers,
    HetFedRep,
    HetLocal,
    HybridLocal,
    HyFEM,
    LocalOnly,
)
from fedhet.plugins import UploadPrivacy
from tests.conftest import make_client
from tests.plugins.uploads import UploadCase, check_uploads


def blobs() -> FederatedDataModule:
    """Three clients sharing one feature space (FedAvg, FedRep, FedPAC)."""
    return FederatedDataModule(
        [make_client("a", 40, 0, classes=(0, 1)), make_client("b", 32, 1, classes=(1, 2)), make_client("c", 48, 2)]
    )


def tabular_sites() -> FederatedDataModule:
    """Three clients with their own columns (3, 4, 5) and partly their own classes (Global Layers)."""
    clients = []
    for cid, n, dim, classes in (("a", 30, 3, (0, 1)), ("b", 27, 4, (1, 2, 3)), ("c", 33, 5, (0, 3))):
        g = torch.Generator().manual_seed(n)
        y = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=g)]
        clients.append(ClientDataModule(cid, torch.randn(n, dim, generator=g) + y[:, None], y, 4, batch_size=8))
    return FederatedDataModule(clients)


FLIC_TINY = {"latent_dim": 8, "embedding_hidden_dims": [16], "hidden_width": 12}


def hybrid_blocks() -> FederatedDataModule:
    """Three clients holding different feature blocks and classes (HyFEM)."""
    table = {
        "a": {"blocks": ["v0", "v1"], "classes": [0, 1]},
        "b": {"blocks": ["v1", "v2"], "classes": [1, 2, 3]},
        "c": {"blocks": ["v0", "v2"], "classes": [2, 3]},
    }
    data = {"num_classes": 4, "num_views": 3, "samples_per_class": 40, "latent_dim": 12, "view_latent_dim": 6}
    return HybridFederation("synthetic", table, data_args=data, batch_size=16, seed=0)


GL_TINY = {"embed_dim": 4, "num_heads": 2, "num_blocks": 1, "width": 8}
FEDPAC_STATISTICS = frozenset({CENTROIDS, COUNTS, HEAD_H, HEAD_V, "fedpac/head.weight", "fedpac/head.bias"})

CASES = {
    "LocalOnly": UploadCase(lambda: LocalOnly(hidden_dims=[8]), blobs, never=("*",)),
    "FedAvg": UploadCase(lambda: FedAvg(hidden_dims=[8]), blobs),
    "FedAvg-FT": UploadCase(lambda: FedAvg(hidden_dims=[8], finetune_epochs=1), blobs),
    "FedRep": UploadCase(lambda: FedRep(hidden_dims=[8], head_epochs=1), blobs, never=("head.*",)),
    "FedProx": UploadCase(lambda: FedProx(hidden_dims=[8]), blobs),
    "FedPer": UploadCase(lambda: FedPer(hidden_dims=[8]), blobs, never=("head.*",)),
    "FedBABU": UploadCase(lambda: FedBABU(hidden_dims=[8]), blobs),  # the untrained head is shared, by design
    "FedAvg-DP": UploadCase(
        lambda: FedAvg(hidden_dims=[8]), blobs, trainer_kwargs={"server_update": UploadPrivacy(0.1, 1.0)}
    ),
    "FedPAC": UploadCase(
        lambda: FedPAC(hidden_dims=[8], head_epochs=1), blobs, statistics=FEDPAC_STATISTICS, never=("head.*",)
    ),
    "FedPAC-no-collaboration": UploadCase(
        lambda: FedPAC(hidden_dims=[8], head_epochs=1, classifier_collaboration=False, feature_alignment=True),
        blobs,
        statistics=frozenset({CENTROIDS, COUNTS}),
        never=("head.*",),
    ),
    "FLIC": UploadCase(
        lambda: FLIC(**FLIC_TINY, pretrain_epochs=2, variant="hl"),
        blobs,
        statistics=frozenset({ANCHOR_MEANS}),
        never=("body.embed.*", "head.*"),
    ),
    "HetFedRep": UploadCase(lambda: HetFedRep(**FLIC_TINY), blobs, never=("body.embed.*", "head.*")),
    "HetLocal": UploadCase(lambda: HetLocal(**FLIC_TINY), blobs, never=("*",)),
    "FedHeNN": UploadCase(
        lambda: FedHeNN(**FLIC_TINY, rad_size=10), blobs, statistics=frozenset({KERNEL}), never=("*",)
    ),
    "FedDaDiL": UploadCase(
        lambda: FedDaDiL(num_atoms=2, atom_size=16, batch_size=8, target="theta45", barycenter_iters=3),
        lambda: RotatedBlobsDomains(batch_size=16, samples_per_class=24),
        statistics=frozenset(ATOM_NAMES),  # the atom version only: the coordinates (alpha) stay on the client
        never=("*",),
    ),
    "HyFEM": UploadCase(
        lambda: HyFEM(extractor_dims=[5], hidden_dim=6),
        hybrid_blocks,
        statistics=lambda module: {STAT_PREFIX + name for name, _ in module.named_parameters()},  # for matching
        never=("*",),
    ),
    "HybridLocal": UploadCase(lambda: HybridLocal(extractor_dims=[5], hidden_dim=6), hybrid_blocks, never=("*",)),
    "GlobalLayers": UploadCase(
        lambda: GlobalLayers(**GL_TINY),
        tabular_sites,
        never=(
            "input_norm.*",
            "embedding.*",
            "blocks.*",
            "layer1.*",
            "layer5.*",
            "head.*",
            "*running_*",
            "*num_batches_tracked",
            "label_index",
        ),
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_uploads_hold_only_the_declared_shared_parameters_and_statistics(case, tmp_path):
    check_uploads(case, str(tmp_path))


def test_the_check_catches_a_personal_layer_that_leaves_the_client(tmp_path):
    class LeakyFedRep(FedRep):
        shared = ("body.*", "head.bias")

    leaky = UploadCase(lambda: LeakyFedRep(hidden_dims=[8], head_epochs=1), blobs, never=("head.*",))
    with pytest.raises(AssertionError, match=r"personal state \['head.bias'\] left the client"):
        check_uploads(leaky, str(tmp_path))


def test_the_check_catches_raw_data_in_a_statistic(tmp_path):
    class RawFedAvg(FedAvg):
        def on_train_end(self):
            super().on_train_end()
            self.raw = next(iter(self.train_batches()))[0][:1].clone()

        def client_statistics(self):
            return {"first_sample": self.raw}

        def upload_declaration(self, spec):
            return UploadDeclaration({"first_sample": TensorSpec((1, *spec.input_shape))})

    raw = UploadCase(lambda: RawFedAvg(hidden_dims=[8]), blobs, statistics=frozenset({"first_sample"}))
    with pytest.raises(AssertionError, match="'first_sample' holds a raw training sample"):
        check_uploads(raw, str(tmp_path))
