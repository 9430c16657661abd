r"""FedPAC: personalised federated learning with feature alignment and classifier collaboration.

J. Xu, X. Tong, S.-L. Huang, "Personalized Federated Learning with Feature Alignment and Classifier Collaboration",
ICLR 2023. Shared body, personal linear head; each round a client trains its head (body frozen), then its body (head
frozen) with cross-entropy plus :math:`\lambda` times the distance of its features to the global class centroids. The
server averages bodies and centroids (:class:`~fedhet.callbacks.CentroidSync`) and gives every client a mix of the
participants' heads whose weights solve one simplex QP per client (:class:`~fedhet.callbacks.HeadMixing`). The server
step, the names of what travels and the upload declaration are in :mod:`fedhet.callbacks.fedpac`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback
from torch import Tensor

from fedhet.callbacks.fedpac import (
    CENTROIDS,
    COUNTS,
    GLOBAL_CENTROIDS,
    GLOBAL_COUNTS,
    HEAD_H,
    HEAD_NAMES,
    HEAD_PREFIX,
    HEAD_V,
    CentroidSync,
    HeadMixing,
    fedpac_upload,
)
from fedhet.core import ClientSpec, LocalPhase, Stacking, TensorSpec, UploadDeclaration
from fedhet.functional.centroids import (
    class_feature_sums,
    feature_alignment_losses,
    head_statistics,
)
from fedhet.modules.baselines import FedRep


class FedPAC(FedRep):
    r"""FedPAC's client: shared body :math:`f_\theta`, personal linear head :math:`g_\phi`, two-phase local schedule.

    Local round (spec §4.2): with the received global body, one pass over the training data gives the class counts
    :math:`n_k`, class means :math:`\mu_k` and FedPAC's head statistics :math:`H, V/n`; then ``head_epochs`` epochs of
    cross-entropy on the head (``head_lr``), then the trainer's local epochs on the body (``lr``) with

    .. math::
        \mathcal{L} = \mathrm{CE}(g_\phi(f_\theta(x)), y) + \lambda \frac{1}{d} \| f_\theta(x) - c_y \|^2

    where :math:`c` are the global centroids of the previous round (no alignment before the first aggregation; a class
    without a global centroid is aligned to the client's own pre-training centroid); finally a pass with the trained
    body gives the local centroids. Uploads: the body (``shared``), and the declared statistics only — centroids and
    counts with feature alignment, :math:`H`, :math:`V/n` and the trained head with classifier collaboration (the
    server needs the heads to mix them; they are never averaged into a shared head).

    Ablations (paper table 2): ``feature_alignment`` / ``classifier_collaboration`` both on (FedPAC), FA only, CC only,
    or neither (FedRep-like alternating training).

    Args:
        lambda_align: :math:`\lambda`, weight of the feature-alignment loss.
        feature_alignment: align features to the global centroids (and run :class:`~fedhet.callbacks.CentroidSync`).
        classifier_collaboration: mix heads with QP weights (and run :class:`~fedhet.callbacks.HeadMixing`).
        head_lr: learning rate of the head phase (the body phase uses ``lr``).
        head_epochs: epochs of the head phase.
        network: ``"auto"`` (the paper's CNN for ``(C, 28, 28)``/``(C, 32, 32)`` inputs, else an MLP of
            ``hidden_dims``), ``"cnn"`` (the paper's CNN, required) or ``"mlp"``.
        mix_threshold: QP weights at or below this are dropped before renormalising.
        lr: learning rate of the body phase.
        momentum: SGD momentum (both phases).
        weight_decay: L2 penalty (both phases).
        hidden_dims: hidden widths of the MLP body when no CNN is used.
        **kwargs: other :class:`~fedhet.modules.FederatedClassifier` arguments.

    """

    def __init__(
        self,
        lambda_align: float = 1.0,
        feature_alignment: bool = True,
        classifier_collaboration: bool = True,
        head_lr: float = 0.1,
        head_epochs: int = 1,
        network: Literal["auto", "cnn", "mlp"] = "auto",
        mix_threshold: float = 1e-3,
        lr: float = 0.01,
        momentum: float = 0.5,
        weight_decay: float = 5e-4,
        hidden_dims: Sequence[int] = (128,),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            head_epochs=head_epochs,
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            hidden_dims=hidden_dims,
            network=network,
            **kwargs,
        )
        if lambda_align < 0:
            raise ValueError(f"FedPAC: field 'lambda_align' must be >= 0, got {lambda_align}")
        if head_lr <= 0:
            raise ValueError(f"FedPAC: field 'head_lr' must be positive, got {head_lr}")
        if not 0 <= mix_threshold < 1:
            raise ValueError(f"FedPAC: field 'mix_threshold' must be in [0, 1), got {mix_threshold}")
        self.lambda_align = lambda_align
        self.feature_alignment = feature_alignment
        self.classifier_collaboration = classifier_collaboration
        self.head_lr = head_lr
        self.mix_threshold = mix_threshold
        self._upload: dict[str, Tensor] = {}
        self._global_centroids: Tensor | None = None
        self._global_available: Tensor | None = None
        self._own_centroids: Tensor | None = None

    def configure_callbacks(self) -> list[Callback]:
        """:class:`~fedhet.callbacks.CentroidSync` then :class:`~fedhet.callbacks.HeadMixing`, per the switches.

        The server runs them in this order (neither reads what the other writes).
        """
        callbacks: list[Callback] = []
        if self.feature_alignment:
            callbacks.append(CentroidSync())
        if self.classifier_collaboration:
            callbacks.append(HeadMixing(threshold=self.mix_threshold))
        return callbacks

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD with the head at ``head_lr`` and the body at ``lr`` (a phase freezes the other part)."""
        head = list(self.head.parameters())
        head_ids = {id(p) for p in head}
        body = [p for p in self.parameters() if id(p) not in head_ids]
        groups = [{"params": body, "lr": self.lr}, {"params": head, "lr": self.head_lr}]
        return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    # ---------------------------------------------------------------- local schedule
    def local_phases(self) -> list[LocalPhase]:
        """``head_epochs`` on the head, then the trainer's local epochs on the body."""
        return [LocalPhase("head", trainable=("head.*",), epochs=self.head_epochs), LocalPhase("body", ("body.*",))]

    def _alignment_centroids(self) -> Tensor | None:
        """The global centroids this step aligns to: in the body phase, after the first aggregation; else ``None``."""
        phase = self.local_phase.name if self.local_phase is not None else None
        aligns = phase == "body" and self.feature_alignment and self.lambda_align > 0
        return self._global_centroids if aligns else None

    def stacking(self) -> Stacking | None:
        """Its hooks run per client in stacks, keeping what ``on_train_start`` sets (the client's own centroids)."""
        return Stacking(client_attributes=("_upload", "_own_centroids"))

    def sample_losses(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        r"""Each sample's loss, shape ``(B,)``: cross-entropy, plus :math:`\lambda` times its alignment term (body).

        Their mean is :meth:`training_step`'s loss (the alignment loss, logged as ``train/align``, is the mean of the
        terms, every class having a target: the global centroid or the client's own), so FedPAC trains clients in stacks
        (``StackedRunner``); the client's own centroids, set by :meth:`on_train_start`, are one of the
        ``client_attributes`` of its :meth:`stacking`, given to each client of a stack under ``torch.func.vmap``.
        """
        x, y = batch
        z = self.body(x)
        losses = F.cross_entropy(self.head(z), y, reduction="none")
        centroids = self._alignment_centroids()
        if centroids is not None:
            align = feature_alignment_losses(z, y, centroids, self._global_available, self._own_centroids)
            self.log("train/align", align.mean())  # logs nothing in a stack (no LocalTraining there)
            losses = losses + self.lambda_align * align
        return losses

    # ---------------------------------------------------------------- statistics
    @torch.no_grad()
    def class_sums(self, loader: Iterable[Any]) -> tuple[Tensor, Tensor, Tensor]:
        """One body pass over ``loader``: class counts ``(K,)``, feature sums ``(K, d)``, square norms ``(K,)``."""
        k, d = self.head.out_features, self.head.in_features
        counts = torch.zeros(k, device=self.device)
        sums = torch.zeros(k, d, device=self.device)
        squares = torch.zeros(k, device=self.device)
        for x, y in loader:
            x, y = x.to(self.device), y.to(self.device)
            n, s, q = class_feature_sums(self.body(x).float(), y, k)
            counts += n
            sums += s
            squares += q
        return counts, sums, squares

    def on_train_start(self) -> None:
        """Statistics of the received body (before local training): counts, own centroids, :math:`H` and :math:`V/n`."""
        self._upload = {}
        self._own_centroids = None
        if not (self.feature_alignment or self.classifier_collaboration):
            return
        counts, sums, squares = self.class_sums(self.train_batches())
        self._own_centroids = sums / counts.clamp_min(1).unsqueeze(1)
        if self.classifier_collaboration:
            h, v = head_statistics(counts, sums, squares)
            self._upload[HEAD_H] = h
            self._upload[HEAD_V] = v / counts.sum().clamp_min(1)

    def on_train_end(self) -> None:
        """Local centroids of the trained body, and the trained head for mixing; then unfreeze everything."""
        super().on_train_end()
        if self.feature_alignment:
            counts, sums, _ = self.class_sums(self.train_batches())
            self._upload[CENTROIDS] = sums / counts.clamp_min(1).unsqueeze(1)
            self._upload[COUNTS] = counts
        if self.classifier_collaboration:
            for name in HEAD_NAMES:
                self._upload[HEAD_PREFIX + name] = self.get_parameter(name).detach().clone()

    def client_statistics(self) -> dict[str, Tensor]:
        """What FedPAC uploads besides the body (see the class docstring)."""
        return dict(self._upload)

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """FedPAC's statistics for a client, by switch (:func:`~fedhet.callbacks.fedpac.fedpac_upload`).

        Centroids ``(K, d)`` and counts ``(K,)`` with feature alignment; :math:`H` ``(K, d)``, :math:`v` ``()`` and
        the trained head with classifier collaboration; ``train/align`` besides the loss.
        """
        head = {name: TensorSpec.of(self.get_parameter(name)) for name in HEAD_NAMES}
        return fedpac_upload(
            self.head.out_features,
            self.head.in_features,
            head,
            self.feature_alignment,
            self.classifier_collaboration,
        )

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """The global centroids and which classes have one."""
        if GLOBAL_CENTROIDS in statistics:
            self._global_centroids = statistics[GLOBAL_CENTROIDS].to(self.device)
            self._global_available = statistics[GLOBAL_COUNTS].to(self.device) > 0
