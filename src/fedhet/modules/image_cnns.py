"""The image CNNs of every classifier's ``network="cnn"``: FedPAC's two (Xu et al., ICLR 2023, appendix B.1).

They are split into body and linear head; :class:`~fedhet.modules.FederatedClassifier` (FedAvg, FedRep, FedPAC and
the other classifiers) builds its body with :func:`paper_body` for ``(C, 28, 28)`` and ``(C, 32, 32)`` images.

Both end their body with ``Linear(·, 128)`` + LeakyReLU, so the feature dimension is :math:`d = 128`; the head is
``Linear(128, K)``. No batch normalisation and no dropout, so features do not depend on the train/eval mode.
"""

from __future__ import annotations

from torch import Tensor, nn

FEATURE_DIM = 128


def cnn28_body(in_channels: int = 1) -> nn.Sequential:
    """The Fashion-MNIST/EMNIST body: input ``(B, in_channels, 28, 28)`` -> features ``(B, 128)``.

    Conv(16, 5) -> LeakyReLU -> MaxPool(2) -> Conv(32, 5, pad 1) -> LeakyReLU -> MaxPool(2) -> Linear(800, 128)
    -> LeakyReLU.
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 5),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),  # 16 x 12 x 12
        nn.Conv2d(16, 32, 5, padding=1),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),  # 32 x 5 x 5
        nn.Flatten(),
        nn.Linear(32 * 5 * 5, FEATURE_DIM),
        nn.LeakyReLU(),
    )


def cnn32_body(in_channels: int = 3) -> nn.Sequential:
    """The CIFAR-10/CINIC-10 body: input ``(B, in_channels, 32, 32)`` -> features ``(B, 128)``.

    As :func:`cnn28_body` with a third Conv(64, 3, pad 1) -> LeakyReLU -> MaxPool(2) block; Linear(576, 128).
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 5),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),  # 16 x 14 x 14
        nn.Conv2d(16, 32, 5, padding=1),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),  # 32 x 6 x 6
        nn.Conv2d(32, 64, 3, padding=1),
        nn.LeakyReLU(),
        nn.MaxPool2d(2),  # 64 x 3 x 3
        nn.Flatten(),
        nn.Linear(64 * 3 * 3, FEATURE_DIM),
        nn.LeakyReLU(),
    )


def paper_body(input_shape: tuple[int, ...]) -> nn.Sequential | None:
    """The paper's body for ``(C, 28, 28)`` or ``(C, 32, 32)`` images, ``None`` for any other input shape."""
    if len(input_shape) == 3 and input_shape[1:] == (28, 28):
        return cnn28_body(input_shape[0])
    if len(input_shape) == 3 and input_shape[1:] == (32, 32):
        return cnn32_body(input_shape[0])
    return None


class FedPACNet(nn.Module):
    """A paper CNN as one module: ``forward`` returns ``(features, logits)`` like the reference code.

    Args:
        input_shape: ``(C, 28, 28)`` (CNN_FMNIST) or ``(C, 32, 32)`` (CifarCNN).
        num_classes: :math:`K`.

    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        body = paper_body(tuple(input_shape))
        if body is None:
            raise ValueError(f"FedPACNet: field 'input_shape' must be (C, 28, 28) or (C, 32, 32), got {input_shape}")
        self.body = body
        self.head = nn.Linear(FEATURE_DIM, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Features ``(B, 128)`` and logits ``(B, K)``."""
        z = self.body(x)
        return z, self.head(z)
