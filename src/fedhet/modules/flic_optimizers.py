r"""FLIC's optimizers: the model's Adam, the preparation phases' Adam and the anchor copy's Adam.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, and its
reference code: Adam everywhere, with weight decay on the weight matrices of the shared layer :math:`\alpha` and of the
personal classifier :math:`\beta_i` only (never on the embedding :math:`\phi_i`, never on biases).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def model_adam(model: nn.Module, lr: float, weight_decay: float, undecayed: str = "body.embed.") -> torch.optim.Adam:
    r"""Adam over every parameter of ``model``, with ``weight_decay`` on its weight matrices outside ``undecayed``.

    Args:
        model: the module (its ``named_parameters()``).
        lr: the learning rate.
        weight_decay: the decay of the weight matrices (parameters of two dimensions or more) outside ``undecayed``.
        undecayed: the name prefix of the parameters that never decay (the embedding :math:`\phi_i`).

    Returns:
        Adam with two groups: the parameters without decay, then the decayed ones.

    """
    decayed = [p for name, p in model.named_parameters() if not name.startswith(undecayed) and p.ndim > 1]
    ids = {id(p) for p in decayed}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": rest, "weight_decay": 0.0}, {"params": decayed, "weight_decay": weight_decay}]
    return torch.optim.Adam(groups, lr=lr)


def engine_optimizers(
    model: torch.optim.Optimizer,
    embedding: nn.Module,
    pretrain_lr: float,
    anchor_copy: Callable[[], torch.optim.Optimizer] | None,
) -> list[torch.optim.Optimizer]:
    r"""The optimizers the engine steps, by index: 0 the model's, 1 the preparation phases', 2 the anchor copy's.

    Args:
        model: the model's optimizer (:func:`model_adam`).
        embedding: :math:`\phi_i`, trained alone by the preparation phases (Adam at ``pretrain_lr``).
        pretrain_lr: the preparation phases' learning rate.
        anchor_copy: makes a fresh local copy of the received anchors and returns its Adam (``anchor_update="code"``);
            ``None``: no copy, no optimizer 2.

    """
    optimizers = [model, torch.optim.Adam(embedding.parameters(), lr=pretrain_lr)]
    return optimizers if anchor_copy is None else [*optimizers, anchor_copy()]
