r"""What a FLIC client does over one participation: prepares its embedding, keeps its anchor copy, makes its upload.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, Alg. S2.
:class:`Participation` runs the bodies of :class:`~fedhet.modules.FLIC`'s hooks on the module it is handed: at the
start, the pre-training (or re-alignment) that no engine phase runs and, with ``anchor_update="code"``, the local copy
of the received anchors that the module steps itself; at each phase change, the record of the preparation phase's
losses; at each step, the copy's step or its objective; at the end, the client's anchors by either rule
(:mod:`~fedhet.modules.flic_anchor_rules`), how far they moved and the upload. The per-client tensors stay attributes
of the module (the stacked path keeps them per client, :data:`~fedhet.modules.flic_steps.CLIENT_ATTRIBUTES`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from fedhet.core import ClientSpec, LocalPhase, LocalTraining
from fedhet.functional.anchors import anchor_move
from fedhet.modules.flic_anchor_rules import AnchorCopy, CodeAnchorRule, PaperAnchorRule
from fedhet.modules.flic_nets import frozen_chain
from fedhet.modules.flic_pretraining import ALIGNMENT_PHASES, AlignmentRecord
from fedhet.modules.flic_uploads import anchor_upload
from fedhet.plugins.clients.local_loop import phase_loader


class FLICClient(Protocol):
    """What :class:`Participation` reads and sets on the module (:class:`~fedhet.modules.FLIC`)."""

    anchor_means: Tensor
    pretrained: Tensor
    pretrain_history: list[float]
    anchor_move: float
    anchor_holders_only: bool
    local_training: LocalTraining | None
    _phase: str | None
    _upload: dict[str, Tensor]
    _local_means: Tensor | None
    _local_factors: Tensor | None

    @property
    def spec(self) -> ClientSpec: ...  # noqa: D102
    @property
    def hidden(self) -> nn.Module: ...  # noqa: D102
    @property
    def head(self) -> nn.Module: ...  # noqa: D102
    @property
    def uses_anchors(self) -> bool: ...  # noqa: D102
    @property
    def code_anchor_update(self) -> bool: ...  # noqa: D102
    def anchor_factors_or_none(self) -> Tensor | None: ...  # noqa: D102
    def train_batches(self) -> Iterable[Any]: ...  # noqa: D102
    def preparation_phases(self) -> list[LocalPhase]: ...  # noqa: D102
    def pretrain_embedding(self, loader: Iterable[Any], epochs: int) -> list[float]: ...  # noqa: D102
    def embed_all(self, loader: Iterable[Any]) -> tuple[Tensor, Tensor]: ...  # noqa: D102
    def paper_anchor_step(self, z: Tensor, y: Tensor) -> tuple[Tensor, Tensor | None]: ...  # noqa: D102
    def log(self, name: str, value: Tensor, prog_bar: bool = False) -> None: ...  # noqa: D102


class Participation:
    """The hooks' work over a participation (see the module's docstring).

    Args:
        code_rule: the reference code's per-batch steps on a local copy (``anchor_update="code"``).
        paper_rule: the paper's one step after training (``anchor_update="paper"``).

    """

    def __init__(self, code_rule: CodeAnchorRule, paper_rule: PaperAnchorRule) -> None:
        self.code_rule = code_rule
        self.paper_rule = paper_rule
        self.optimizer: torch.optim.Optimizer | None = None
        """The anchor copy's Adam when the module steps the copy itself (no engine steps it as optimizer 2)."""
        self.record = AlignmentRecord()
        """The step losses of the preparation phase under way."""

    def start(self, module: FLICClient) -> None:
        r"""Prepare the participation's anchor update; pre-train (or re-align) :math:`\phi_i` where no engine does.

        When whoever drives the training runs no preparation phase (a plain Trainer, or a caller of the hooks), the
        module pre-trains at the first participation (or re-aligns later) itself with its ``pretrain_embedding``; with
        ``anchor_update="code"`` and no engine stepping the anchor copy (it made none), the module steps a copy itself.
        """
        module._upload = {}
        for phase in module.preparation_phases():
            if module.local_training is None or not module.local_training.runs(phase.name):
                module.pretrain_embedding(phase_loader(module.train_batches(), phase), phase.epochs or 1)
                module.pretrained.fill_(True)
        if module.code_anchor_update and module._local_means is None:
            self.optimizer = self.copy(module)

    def copy(self, module: FLICClient) -> torch.optim.Optimizer:
        """A fresh local copy of the received anchors (the module's ``_local_means``, ``_local_factors``), its Adam."""
        copy = self.code_rule.copy(module.anchor_means, module.anchor_factors_or_none())
        module._local_means, module._local_factors = copy.means, copy.factors
        return copy.optimizer

    def engine_copy(self, module: FLICClient) -> Tensor | None:
        """The anchor copy's means when the engine steps the copy (optimizer 2) in this training, else ``None``."""
        return module._local_means if self.optimizer is None else None

    def enter(self, module: FLICClient, phase: LocalPhase | None) -> None:
        """A phase change: leaving a preparation phase records its losses, entering pre-training marks the embedding.

        Leaving a pre-training or re-alignment phase sets the module's ``pretrain_history``; entering pre-training
        marks the embedding as pre-trained.
        """
        name, current = None if phase is None else phase.name, module._phase
        if current in ALIGNMENT_PHASES and name != current:
            module.pretrain_history = self.record.history()
        if phase is not None and name in ALIGNMENT_PHASES and name != current:
            self.record.start(phase.epochs or 1)
            if name == "pretrain":
                module.pretrained.fill_(True)

    def objective(
        self, module: FLICClient, z: Tensor, y: Tensor, mask: Tensor | None, noise: Tensor | None
    ) -> Tensor | None:
        """The copy's objective on a step when the engine steps the copy, else ``None`` (:meth:`engine_copy`).

        :meth:`CodeAnchorRule.objective <fedhet.modules.flic_anchor_rules.CodeAnchorRule.objective>` on the batch's
        embeddings ``z`` ``(B, k)`` (detached here), its labels ``(B,)``, rows ``mask`` and draws ``noise``.
        """
        copy = self.engine_copy(module)
        if copy is None:
            return None
        return self.code_rule.objective(self._frozen(module), z.detach(), y, copy, module._local_factors, mask, noise)

    def step(self, module: FLICClient, loss: Tensor, align: Tensor | None, z: Tensor, y: Tensor) -> None:
        """After a step: a preparation phase records its loss; else it is logged and, with no engine, the copy steps.

        Args:
            module: the client's module.
            loss: the step's loss.
            align: its alignment term (``None`` when it has none).
            z: the batch's embeddings ``(B, k)``.
            y: its labels ``(B,)``.

        """
        if module._phase in ALIGNMENT_PHASES:
            self.record.add(loss)
            return
        if align is not None:
            module.log("train/align", align)
        if self.optimizer is not None:
            assert module._local_means is not None
            copy = AnchorCopy(module._local_means, module._local_factors, self.optimizer)
            self.code_rule.step(copy, self._frozen(module), z.detach(), y)
        module.log("train/loss", loss, prog_bar=True)

    def end(self, module: FLICClient) -> None:
        """The client's anchors by its rule, how far they moved (``anchor_move``) and the upload."""
        if not module.uses_anchors:
            return
        z, y = module.embed_all(module.train_batches())
        if module.code_anchor_update:
            assert module._local_means is not None
            means, factors = self.code_rule.result(module._local_means, module._local_factors)
            module._local_means, module._local_factors, self.optimizer = None, None, None
        else:
            means, factors = module.paper_anchor_step(z, y)
        module.anchor_move = anchor_move(module.anchor_means, means, z, y)
        holders_only = module.anchor_holders_only
        module._upload = anchor_upload(means, factors, y, module.spec.num_classes, holders_only)

    @staticmethod
    def _frozen(module: FLICClient) -> Callable[[Tensor], Tensor]:
        """The module's classifier with its weights held fixed (detached)."""
        return frozen_chain(module.hidden, module.head)
