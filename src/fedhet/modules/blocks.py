"""Plain ``nn.Module`` building blocks shared by the methods' modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn


def mlp(
    input_dim: int,
    hidden_dims: Sequence[int],
    dropout: float = 0.0,
    activation: Callable[[], nn.Module] = nn.ReLU,
) -> tuple[nn.Sequential, int]:
    """A flatten + ``Linear-ReLU(-Dropout)`` stack; returns it and its output width.

    Args:
        input_dim: features of one flattened sample.
        hidden_dims: widths of the hidden layers; empty gives a flatten only.
        dropout: dropout probability after each hidden layer.
        activation: builds the activation after each hidden layer (``nn.ReLU`` by default).

    Example:
        >>> net, width = mlp(8, [16, 4])
        >>> width
        4

    """
    layers: list[nn.Module] = [nn.Flatten()]
    width = input_dim
    for hidden in hidden_dims:
        layers += [nn.Linear(width, hidden), activation()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = hidden
    return nn.Sequential(*layers), width
