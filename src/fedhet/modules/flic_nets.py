r"""FLIC's per-client embedding networks :math:`\phi_i`, built from the client's own input shape.

Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, appendix S3.3:
vectors go through an MLP ``k_i -> 64 -> 64 -> 64`` (ReLU, no activation on the output; LeakyReLU and dropout 0.5
for BCI), one-channel digit images through a two-convolution CNN with sigmoid activations and a linear layer to the
latent space. :func:`flic_body` puts the embedding before FLIC-HL's shared layer :math:`\alpha`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal, cast

from torch import Tensor, nn
from torch.func import functional_call

from fedhet.core import ClientSpec
from fedhet.modules.blocks import mlp

Activation = Literal["relu", "leaky_relu"]
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU}


def mlp_embedding(
    input_dim: int,
    latent_dim: int = 64,
    hidden_dims: Sequence[int] = (64, 64),
    activation: Activation = "relu",
    dropout: float = 0.0,
) -> nn.Sequential:
    """The vector embedding: flatten, ``Linear-activation(-Dropout)`` per hidden width, then ``Linear`` to the latent.

    Args:
        input_dim: the client's flattened input dimension :math:`k_i`.
        latent_dim: :math:`k`.
        hidden_dims: hidden widths.
        activation: ``"relu"`` (toys) or ``"leaky_relu"`` (the BCI network).
        dropout: dropout after each hidden activation (0.5 in the BCI network).

    Returns:
        a module mapping ``(B, *input_shape)`` to ``(B, latent_dim)``.

    Example:
        >>> import torch
        >>> mlp_embedding(7)(torch.zeros(2, 7)).shape
        torch.Size([2, 64])

    """
    body, width = mlp(input_dim, hidden_dims, dropout, ACTIVATIONS[activation])
    return nn.Sequential(*body, nn.Linear(width, latent_dim))


def cnn_embedding(
    input_shape: Sequence[int], latent_dim: int = 64, fc_activation: bool = False, dropout: float = 0.5
) -> nn.Sequential:
    """The digits CNN: ``Conv(32, 5) -> MaxPool 2 -> sigmoid -> Conv(20, 5) -> Dropout2d(0.5) -> MaxPool 2 -> sigmoid``.

    Then flatten and ``Linear(F, latent_dim)``: no activation on the latent vector by default, as in the reference code,
    so embeddings can reach the anchors' negative coordinates (``fc_activation`` adds the paper's ReLU, which makes
    every embedding non-negative and leaves the alignment term a floor of the squared norm of the anchors' negative
    part). Pooling rounds up, so odd sizes such as 16x15 work (MNIST 28x28 gives F = 20·4·4 = 320, USPS 16x16 gives
    F = 20); images with a side under 16 pixels get padding 2 in both convolutions (8x8 gives F = 20·2·2 = 80).

    Args:
        input_shape: ``(C, H, W)``.
        latent_dim: :math:`k`.
        fc_activation: ReLU after the last linear layer (the paper's figure; off in the reference code).
        dropout: the channel dropout probability after the second convolution (0.5 in the paper; 0 removes it).

    Returns:
        a module mapping ``(B, C, H, W)`` to ``(B, latent_dim)``.

    Example:
        >>> import torch
        >>> [cnn_embedding(s)(torch.zeros(2, *s)).shape[1] for s in [(1, 28, 28), (1, 16, 15), (1, 8, 8)]]
        [64, 64, 64]

    """
    channels, height, width = input_shape
    pad = 2 if min(height, width) < 16 else 0
    for _ in range(2):
        height, width = -(-(height + 2 * pad - 4) // 2), -(-(width + 2 * pad - 4) // 2)
    layers: list[nn.Module] = [
        nn.Conv2d(channels, 32, 5, padding=pad),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Sigmoid(),
        nn.Conv2d(32, 20, 5, padding=pad),
        nn.Dropout2d(dropout),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Sigmoid(),
        nn.Flatten(),
        nn.Linear(20 * height * width, latent_dim),
    ]
    if fc_activation:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def flic_body(
    owner: str,
    spec: ClientSpec,
    network: Literal["auto", "mlp", "cnn"],
    latent_dim: int,
    hidden_width: int | None,
    mlp_options: tuple[Sequence[int], Activation, float],
    cnn_options: tuple[bool, float],
) -> tuple[nn.Sequential, int]:
    r"""A client's body ``embed`` (:math:`\phi_i` for its input shape) then ``hidden`` (:math:`\alpha`), and its width.

    Args:
        owner: the module's name, for the message.
        spec: the client (its input shape picks the embedding).
        network: ``"auto"`` (:func:`cnn_embedding` for ``(C, H, W)`` images, else :func:`mlp_embedding`), ``"mlp"`` or
            ``"cnn"``.
        latent_dim: :math:`k`.
        hidden_width: the width of FLIC-HL's shared layer ``Linear(k, hidden_width)`` + LeakyReLU; ``None`` for
            FLIC-Class (an identity, width :math:`k`).
        mlp_options: the MLP embedding's hidden widths, activation and dropout.
        cnn_options: the CNN embedding's ``fc_activation`` and dropout.

    Raises:
        ValueError: ``network="cnn"`` for a client whose inputs are not ``(C, H, W)`` images.

    """
    shape = tuple(spec.input_shape)
    if network == "cnn" and len(shape) != 3:
        raise ValueError(
            f"{owner}: client '{spec.client_id}' has input shape {shape}; network='cnn' needs (C, H, W) images"
        )
    if network != "mlp" and len(shape) == 3:
        embed = cnn_embedding(shape, latent_dim, *cnn_options)
    else:
        embed = mlp_embedding(spec.input_dim, latent_dim, *mlp_options)
    hidden: nn.Module = nn.Identity()
    if hidden_width is not None:
        hidden = nn.Sequential(nn.Linear(latent_dim, hidden_width), nn.LeakyReLU())
    return nn.Sequential(OrderedDict(embed=embed, hidden=hidden)), latent_dim if hidden_width is None else hidden_width


def frozen_chain(*modules: nn.Module) -> Callable[[Tensor], Tensor]:
    """The composition of ``modules`` (the first applied first) with their weights held fixed (detached).

    Gradients of its output reach its input only, e.g. the anchors a classifier scores, never the classifier.
    """

    def call(z: Tensor) -> Tensor:
        for module in modules:
            params = {name: p.detach() for name, p in module.named_parameters()}
            z = cast(Tensor, functional_call(module, params, (z,)))
        return z

    return call
