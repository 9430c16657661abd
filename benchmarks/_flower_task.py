"""The networks of ``flower_compare.py``'s tasks in plain PyTorch, shared by its two sides; imports only torch.

Flower's side runs in its own venv and never imports fedhet, so it builds its model here; the comparison script
evaluates both sides' final weights with the same builder. Parameter names equal those of fedhet's classifiers
(``body.*``, ``head.*``), so weights move between the sides by name.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Classifier(nn.Module):
    """``head(body(x))``, as fedhet's ``FederatedClassifier`` names its parts."""

    def __init__(self, body: nn.Sequential, width: int, num_classes: int) -> None:
        super().__init__()
        self.body = body
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits."""
        return self.head(self.body(x))


def cnn28_body() -> nn.Sequential:
    """The Fashion-MNIST CNN body of FedPAC's experiments (Xu et al., ICLR 2023, appendix B.1).

    ``(B, 1, 28, 28)`` -> ``(B, 128)``; layer for layer fedhet's ``fedhet.modules.image_cnns.cnn28_body``.
    """
    return nn.Sequential(
        nn.Conv2d(1, 16, 5),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=1),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 5 * 5, 128),
        nn.LeakyReLU(),
    )


def make_model(task: dict) -> Classifier:
    """The task's network: ``task["network"]`` is ``"mlp"`` (one hidden layer) or ``"cnn"`` (:func:`cnn28_body`)."""
    if task["network"] == "cnn":
        return Classifier(cnn28_body(), 128, task["num_classes"])
    body = nn.Sequential(nn.Flatten(), nn.Linear(task["num_features"], task["hidden"]), nn.ReLU())
    return Classifier(body, task["hidden"], task["num_classes"])


@torch.no_grad()
def mean_client_accuracy(task: dict, weights: dict[str, Tensor], test: list[tuple[Tensor, Tensor]]) -> float:
    """Accuracy of the task's network with ``weights`` (by name) on each client's test split, mean over clients."""
    model = make_model(task)
    model.load_state_dict(weights)
    model.eval()
    return sum((model(x).argmax(1) == y).float().mean().item() for x, y in test) / len(test)
