"""FederatedClassifier's ``network`` choice (the FedPAC paper's CNN) for every classifier baseline; FedBABU's budget."""

import math

import pytest
import torch
from torch import nn

from fedhet.core import ClientSpec
from fedhet.modules import FedAvg, FedBABU, FedPer, FedRep, LocalOnly
from fedhet.modules.image_cnns import FedPACNet
from fedhet.plugins import FederatedTrainer, Processes, Reporting

BASELINES = [LocalOnly, FedAvg, FedRep, FedPer, FedBABU]
IMAGE = ClientSpec("img", (1, 28, 28), 10, num_train=4)


def build(cls, spec, **kwargs):
    module = cls(**kwargs)
    module.setup_client(spec)
    module.configure_model()
    return module


@pytest.mark.parametrize("cls", BASELINES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("network", ["cnn", "auto"])
def test_cnn_is_the_papers_network(cls, network):
    module = build(cls, IMAGE, network=network)
    paper = FedPACNet((1, 28, 28), 10)
    assert [(n, p.shape) for n, p in module.named_parameters()] == [(n, p.shape) for n, p in paper.named_parameters()]
    assert sum(p.numel() for p in module.parameters()) == 117_066
    assert module(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


@pytest.mark.parametrize("cls", BASELINES, ids=lambda c: c.__name__)
def test_mlp_stays_the_default(cls):
    module = build(cls, IMAGE, hidden_dims=[128])
    assert not any(isinstance(m, nn.Conv2d) for m in module.modules())
    assert sum(p.numel() for p in module.parameters()) == 784 * 128 + 128 + 128 * 10 + 10


def test_auto_falls_back_to_the_mlp_and_cnn_refuses_other_inputs():
    flat = ClientSpec("flat", (6,), 3, num_train=4)
    assert not any(isinstance(m, nn.Conv2d) for m in build(FedRep, flat, network="auto").modules())
    with pytest.raises(ValueError, match="client 'flat'.*network='cnn'"):
        build(FedAvg, flat, network="cnn")
    with pytest.raises(ValueError, match="FedPer: field 'network'"):
        FedPer(network="resnet")


class CountingFedBABU(FedBABU):
    """FedBABU that counts its optimizer steps (training batches)."""

    steps = 0

    def training_step(self, batch, batch_idx):
        CountingFedBABU.steps += 1
        return super().training_step(batch, batch_idx)


def test_fedbabu_evaluates_after_the_papers_five_finetuning_epochs(tmp_path, tiny_federation):
    trainer = FederatedTrainer(
        rounds=1,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    module = CountingFedBABU(hidden_dims=[8])
    trainer.fit(module, tiny_federation)
    CountingFedBABU.steps = 0
    trainer.test(module, tiny_federation)
    batches = {c: math.ceil(tiny_federation.specs[c].num_train / 8) for c in "abcd"}  # batch size 8
    assert CountingFedBABU.steps == 5 * sum(batches.values())
