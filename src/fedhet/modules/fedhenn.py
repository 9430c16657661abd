r"""FedHeNN, FLIC's representation-alignment baseline: no averaged parameters, a shared kernel on random inputs.

As FLIC's experiments run it (Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces",
TMLR 2024, section 6, adapting Makhija et al., ICML 2022): each client keeps its whole network (FLIC's embedding and a
linear head); after local training it uploads the Gram matrix :math:`K_i = A_i A_i^\top` of its representations
:math:`A_i` of a random alignment dataset (RAD) shared by all clients; the server broadcasts the mean kernel
:math:`K` (:class:`~fedhet.callbacks.KernelSync`), and the local loss adds ``mu_reg`` times
:func:`~fedhet.functional.kernel_penalty` between :math:`K` and the current :math:`K_i`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from lightning.pytorch import Callback
from torch import Tensor

from fedhet.callbacks.fedhenn import GLOBAL_KERNEL, KERNEL, KernelSync, fedhenn_upload
from fedhet.core import ClientSpec, UploadDeclaration
from fedhet.functional.representation_kernels import kernel_penalty, random_alignment_inputs
from fedhet.modules.flic import FLIC


class FedHeNN(FLIC):
    """FLIC-Class's networks without anchors, regularised towards the federation's mean representation kernel.

    Args:
        mu_reg: weight of the kernel penalty (0.1 in the reference code).
        rad_size: number of random alignment inputs (100).
        rad_seed: seed of the random alignment inputs (the same on every client).
        rad_image_side: side of the common random image, cropped to each client's image size.
        **kwargs: the :class:`~fedhet.modules.FLIC` arguments other than ``variant``, ``lambda_align``,
            ``lambda_anchor``, ``pretrain_epochs`` and ``realign_epochs``.

    """

    def __init__(
        self, mu_reg: float = 0.1, rad_size: int = 100, rad_seed: int = 0, rad_image_side: int = 32, **kwargs: Any
    ) -> None:
        super().__init__(
            variant="class", lambda_align=0.0, lambda_anchor=0.0, pretrain_epochs=0, realign_epochs=0, **kwargs
        )
        if mu_reg < 0:
            raise ValueError(f"FedHeNN: field 'mu_reg' must be >= 0, got {mu_reg}")
        if rad_size < 2:
            raise ValueError(f"FedHeNN: field 'rad_size' must be at least 2, got {rad_size}")
        self.mu_reg = mu_reg
        self.rad_size = rad_size
        self.rad_seed = rad_seed
        self.rad_image_side = rad_image_side
        self._global_kernel: Tensor | None = None
        self._kernel: Tensor | None = None

    def configure_model(self) -> None:
        """FLIC's network, plus the client's view of the random alignment inputs (a non-persistent buffer)."""
        if hasattr(self, "head"):
            return
        super().configure_model()
        rad = random_alignment_inputs(self.spec.input_shape, self.rad_size, self.rad_seed, self.rad_image_side)
        self.register_buffer("rad_inputs", rad, persistent=False)

    def kernel(self) -> Tensor:
        r""":math:`K_i = A_i A_i^\top`, shape ``(rad_size, rad_size)``, of the current embedding of the RAD."""
        representations = self.embedding(self.rad_inputs)
        return cast(Tensor, representations @ representations.T)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """Cross-entropy plus ``mu_reg`` times the kernel penalty (once a global kernel has been received)."""
        loss = super().training_step(batch, batch_idx)
        if self.mu_reg and self._global_kernel is not None:
            loss = loss + self.mu_reg * kernel_penalty(self._global_kernel, self.kernel())
        return loss

    def on_train_end(self) -> None:
        """Unfreeze everything; the kernel of the trained embedding (in eval mode) goes in the upload."""
        super().on_train_end()
        mode = self.training
        self.eval()
        with torch.no_grad():
            self._kernel = self.kernel()
        self.train(mode)

    def client_statistics(self) -> dict[str, Tensor]:
        """The kernel of the client's representations of the RAD."""
        return {KERNEL: self._kernel} if self._kernel is not None else {}

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """The kernel ``(rad_size, rad_size)``, embedding dtype (:func:`~fedhet.callbacks.fedhenn.fedhenn_upload`)."""
        dtype = next(self.embedding.parameters()).dtype
        return fedhenn_upload(self.rad_size, dtype, super().upload_declaration(spec).metrics)

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """The federation's mean kernel."""
        if GLOBAL_KERNEL in statistics:
            self._global_kernel = statistics[GLOBAL_KERNEL]

    def configure_callbacks(self) -> list[Callback]:
        """:class:`~fedhet.callbacks.KernelSync`."""
        return [KernelSync()]
