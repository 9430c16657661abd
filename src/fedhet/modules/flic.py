r"""FLIC: personalised federated learning on heterogeneous feature spaces, aligned through shared Gaussian anchors.

A. Rakotomamonjy, M. Vono, H. J. Medina Ruiz, L. Ralaivola, "Personalised Federated Learning On Heterogeneous Feature
Spaces", TMLR 2024. Each client maps its own inputs into a common latent space with a personal embedding
:math:`\phi_i`; the embedded class-conditionals are pulled towards shared Gaussian anchors
:math:`\mu_c = \mathcal{N}(v_c, \Sigma_c)` by a closed-form :math:`W_2^2` term; a FedRep-style model classifies the
latent vectors. The server averages the clients' anchors (:class:`~fedhet.callbacks.AnchorUpdate`). Also here: the
paper's baselines on the same networks, :class:`HetFedRep` (no alignment) and :class:`HetLocal` (nothing shared).

:class:`FLIC` composes parts with one job each: the anchor terms of the loss (:mod:`~fedhet.modules.flic_terms`), the
terms of each phase's steps, their sum and their draws for the stacked path (:mod:`~fedhet.modules.flic_steps`), the
two anchor update rules (:mod:`~fedhet.modules.flic_anchor_rules`), the work of its hooks over a participation
(:mod:`~fedhet.modules.flic_participation`), the preparation of the embedding
(:mod:`~fedhet.modules.flic_pretraining`), the local schedule (:mod:`~fedhet.modules.flic_schedule`), the networks
(:mod:`~fedhet.modules.flic_nets`), the optimizers (:mod:`~fedhet.modules.flic_optimizers`), the upload
(:mod:`~fedhet.modules.flic_uploads`) and the constructor's checks (:mod:`~fedhet.modules.flic_options`); the anchors'
start and their move are maths in :mod:`fedhet.functional.anchors`.

Local schedule (:class:`~fedhet.modules.flic_schedule.FLICSchedule`): at its first participation a client pre-trains
:math:`\phi_i` for ``pretrain_epochs`` on the alignment term alone (the paper pre-trains every client before round 0;
at first participation is the same for a client that had no earlier round, as a new client does in S1.4); then, each
round, the trainer's local epochs train :math:`(\phi_i, \beta_i)` and, for FLIC-HL, ``rep_epochs`` epochs train
:math:`\alpha` alone. The client's anchor update follows the reference code (``anchor_update="code"``, a per-batch Adam
step on a local copy) or the paper (``"paper"``, one step after training).

Under the engine, pre-training and re-alignment are preparation phases stepping their own Adam (optimizer 1), reported
as ``train/pretrain_loss``, and the anchor copy is optimizer 2, stepped by every local phase; under a plain
``lightning.Trainer`` the module runs both in its own hooks, with the same maths. Clients train in stacks too
(``StackedRunner``): one loss, :meth:`FLIC.loss_terms`, over a presence mask of all :math:`C` classes, its draws made
with the batch (:meth:`FLIC.step_draws`), the numbers ``training_step`` draws (the stacked path refuses layers that draw
random numbers, e.g. dropout).

Uploads: the shared parameters (``body.hidden.*`` for FLIC-HL, nothing for FLIC-Class) and the statistics
``flic/anchor_means`` :math:`(C, k)` (``flic/anchor_factors`` :math:`(C, k, k)` with learned covariances,
``flic/anchor_counts`` :math:`(C,)` with ``anchor_holders_only``). Receives ``flic/global_anchor_means`` (and factors).
:math:`\phi_i` and :math:`\beta_i` never leave the client.

The reference code's switches are off by default: ``anchor_variance`` ``e``, ``anchor_stats="sampled"``,
``realign_epochs`` (every later participation; the code re-aligns every client after every aggregation),
``rep_start_round``, ``final_local_epochs``, ``weight_decay=1e-3`` and the 9 + 1 epoch split (``trainer.local_epochs:
9``); its digits CNN has no activation before the latent space (``cnn_fc_activation``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple, cast

import torch
from lightning.pytorch import Callback
from torch import Tensor, nn

from fedhet.callbacks.flic import GLOBAL_FACTORS, GLOBAL_MEANS, AnchorUpdate, flic_upload
from fedhet.core import ClientSpec, LocalPhase, Stacking, UploadDeclaration
from fedhet.functional.anchors import initial_anchors
from fedhet.modules.classifier import FederatedClassifier
from fedhet.modules.flic_anchor_rules import CodeAnchorRule, PaperAnchorRule
from fedhet.modules.flic_nets import Activation, flic_body
from fedhet.modules.flic_optimizers import engine_optimizers, model_adam
from fedhet.modules.flic_options import check_flic_options
from fedhet.modules.flic_participation import Participation
from fedhet.modules.flic_pretraining import ALIGNMENT_PHASES, pretrain_embedding
from fedhet.modules.flic_schedule import REPRESENTATION, FLICSchedule
from fedhet.modules.flic_steps import CLIENT_ATTRIBUTES, StepTerms
from fedhet.modules.flic_terms import AnchorTerms


class _Terms(NamedTuple):
    """A training step's loss, its alignment term (``None`` when the step has none) and the batch's embeddings."""

    loss: Tensor
    align: Tensor | None
    z: Tensor


class FLIC(FederatedClassifier):
    r"""FLIC's client: personal embedding :math:`\phi_i`, Gaussian anchors, FedRep on the latent space.

    The network is ``head(body.hidden(body.embed(x)))``: ``body.embed`` is :math:`\phi_i`, built from the client's input
    shape (an MLP for vectors, a small CNN for images) and never shared; ``body.hidden`` is FLIC-HL's shared layer
    :math:`\alpha` (``Linear(latent_dim, hidden_width)`` + LeakyReLU; none in FLIC-Class); ``head`` is the personal
    linear classifier :math:`\beta_i`. On a batch the loss is (paper eq. 3 and Alg. S2)

    .. math::
        \mathrm{CE}(g(\phi_i(x)), y) + \lambda_1 \sum_{c \in P(B)} W_2^2\big(\mu_c, \mathcal{N}(\hat m_c, \hat S_c)\big)
        + \lambda_2 \sum_{c \in P(B)} \frac{1}{J} \sum_{j=1}^{J} \mathrm{CE}(g(Z_c^j), c),
        \quad Z_c^j = v_c + L_c \xi_j

    over the classes :math:`P(B)` of the batch, with the batch moments of the embedded class (not detached) and the
    anchors held fixed (:class:`~fedhet.modules.flic_terms.AnchorTerms`). The local schedule, the two anchor updates,
    the engine's phases, the stacked path and the uploads are described in the module's docstring;
    :attr:`anchor_move` reports how far the client's anchor update moved the anchors.

    Args:
        variant: ``"class"`` (FLIC-Class: only the anchors are shared) or ``"hl"`` (FLIC-HL: and a shared hidden
            layer).
        latent_dim: :math:`k`, the latent dimension (64 in the paper).
        hidden_width: width of FLIC-HL's shared layer (100 in the reference code).
        embedding_hidden_dims: hidden widths of the MLP embedding.
        embedding_activation: activation of the MLP embedding, ``"relu"`` or ``"leaky_relu"`` (BCI).
        embedding_dropout: dropout after each hidden layer of the MLP embedding (0.5 for BCI).
        network: ``"auto"`` (the CNN for ``(C, H, W)`` images, else the MLP), ``"mlp"`` or ``"cnn"``.
        cnn_fc_activation: ReLU after the CNN's last linear layer (the paper's description; off by default as in the
            reference code: a ReLU there keeps embeddings off the anchors' negative coordinates).
        cnn_dropout: the CNN's channel dropout after its second convolution (0.5 in the paper).
        lambda_align: :math:`\lambda_1`, weight of the :math:`W_2^2` term.
        lambda_anchor: :math:`\lambda_2`, weight of the cross-entropy on anchor samples.
        anchor_samples: :math:`J`, anchor samples per class of the batch; ``None`` for the batch size (the code).
        anchor_std: standard deviation of the anchor means at initialisation (10 in the code).
        anchor_variance: the anchors' covariance is this times the identity at initialisation (paper 1, code ``e``).
        learn_covariance: learn and share the anchors' Cholesky factors :math:`L_c` too.
        anchor_seed: seed of the anchor initialisation (the same on every client).
        anchor_stats: ``"closed_form"`` (exact anchor parameters, the paper) or ``"sampled"`` (the code).
        anchor_update: ``"code"`` (per-batch Adam steps on a local copy, the reference code) or ``"paper"`` (one
            step after local training, Alg. S2); see above.
        anchor_lr: :math:`\eta` of the anchor update (Adam's learning rate with ``"code"``).
        anchor_weighting: server weights :math:`\omega_i`, ``"uniform"`` (the paper's :math:`1/b`) or ``"samples"``.
        anchor_holders_only: the server averages class :math:`c` over the participants that hold it only.
        covariance_aggregation: with learned covariances, ``"bures"`` (the exact barycenter) or ``"cholesky_mean"``
            (the paper's average of Cholesky factors).
        pretrain_epochs: :math:`K_{pre}`, pre-training epochs of :math:`\phi_i` (0: none).
        pretrain_batch_size: pre-training batch size (``None``: the client's training batches).
        pretrain_lr: Adam learning rate of pre-training and re-alignment.
        realign_epochs: re-alignment epochs at the start of every later participation (the code's 1).
        rep_epochs: epochs of FLIC-HL's representation phase per round.
        rep_start_round: first round that trains :math:`\alpha` (the code's 20).
        final_local_epochs: if set, the last round trains only :math:`\phi_i, \beta_i` for this many epochs (the
            code's 10).
        lr: Adam learning rate of local training.
        weight_decay: weight decay on the weight matrices of :math:`\alpha` and :math:`\beta_i` (the code's 1e-3).

    """

    reuse_optimizers = False  # configure_optimizers() copies the anchors each client received (optimizer 2)
    anchor_means: Tensor  # buffers made by configure_model
    anchor_factors: Tensor
    pretrained: Tensor

    def __init__(
        self,
        variant: Literal["class", "hl"] = "class",
        latent_dim: int = 64,
        hidden_width: int = 100,
        embedding_hidden_dims: Sequence[int] = (64, 64),
        embedding_activation: Activation = "relu",
        embedding_dropout: float = 0.0,
        network: Literal["auto", "mlp", "cnn"] = "auto",
        cnn_fc_activation: bool = False,
        cnn_dropout: float = 0.5,
        lambda_align: float = 1e-3,
        lambda_anchor: float = 1e-3,
        anchor_samples: int | None = None,
        anchor_std: float = 10.0,
        anchor_variance: float = 1.0,
        learn_covariance: bool = False,
        anchor_seed: int = 0,
        anchor_stats: Literal["closed_form", "sampled"] = "closed_form",
        anchor_update: Literal["paper", "code"] = "code",
        anchor_lr: float = 1e-3,
        anchor_weighting: Literal["uniform", "samples"] = "uniform",
        anchor_holders_only: bool = False,
        covariance_aggregation: Literal["bures", "cholesky_mean"] = "bures",
        pretrain_epochs: int = 100,
        pretrain_batch_size: int | None = None,
        pretrain_lr: float = 1e-3,
        realign_epochs: int = 0,
        rep_epochs: int = 1,
        rep_start_round: int = 0,
        final_local_epochs: int | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            hidden_dims=embedding_hidden_dims, dropout=embedding_dropout, optimizer="adam", lr=lr, weight_decay=0.0
        )
        check_flic_options(type(self).__name__, locals())
        self.variant = variant
        self.shared = REPRESENTATION if variant == "hl" else ()
        self.latent_dim = latent_dim
        self.hidden_width = hidden_width
        self.embedding_activation = embedding_activation
        self.network = network
        self.cnn_fc_activation = cnn_fc_activation
        self.cnn_dropout = cnn_dropout
        self.lambda_align = lambda_align
        self.lambda_anchor = lambda_anchor
        self.anchor_samples = anchor_samples
        self.anchor_std = anchor_std
        self.anchor_variance = anchor_variance
        self.learn_covariance = learn_covariance
        self.anchor_seed = anchor_seed
        self.anchor_stats = anchor_stats
        self.anchor_update = anchor_update
        self.anchor_lr = anchor_lr
        self.anchor_weighting = anchor_weighting
        self.anchor_holders_only = anchor_holders_only
        self.covariance_aggregation = covariance_aggregation
        self.pretrain_epochs = pretrain_epochs
        self.pretrain_batch_size = pretrain_batch_size
        self.pretrain_lr = pretrain_lr
        self.realign_epochs = realign_epochs
        self.rep_epochs = rep_epochs
        self.rep_start_round = rep_start_round
        self.final_local_epochs = final_local_epochs
        self.head_weight_decay = weight_decay
        self.round_idx: int | None = None
        """The federation round being trained (set by :class:`~fedhet.callbacks.AnchorUpdate`; ``None`` outside)."""
        self.final_round = False
        self.pretrain_history: list[float] = []
        """Mean alignment loss of each epoch of the latest pre-training or re-alignment."""
        self.anchor_move = 0.0
        r"""How far the client's last anchor update moved its anchor means, as a fraction of their distance to its
        embedded class means: the mean over its classes of :math:`\|v_{i,c} - v_c\| / \|v_c - \hat m_{i,c}\|`."""
        self._phase: str | None = None
        self._upload: dict[str, Tensor] = {}
        self._local_means: Tensor | None = None
        self._local_factors: Tensor | None = None
        self.terms = AnchorTerms(latent_dim, anchor_variance, anchor_stats, anchor_samples)
        """The anchor terms of the loss (:class:`~fedhet.modules.flic_terms.AnchorTerms`)."""
        paper_rule = PaperAnchorRule(self.terms, anchor_lr, lambda_align, lambda_anchor)
        self.participation = Participation(CodeAnchorRule(self.terms, anchor_lr), paper_rule)
        """The hooks' work (:class:`~fedhet.modules.flic_participation.Participation`)."""
        self.steps = StepTerms(self.terms, lambda_align, lambda_anchor)
        """The terms of each phase's steps and their draws (:class:`~fedhet.modules.flic_steps.StepTerms`)."""
        self.schedule = FLICSchedule(
            variant == "hl",
            rep_epochs,
            rep_start_round,
            final_local_epochs,
            pretrain_epochs,
            realign_epochs,
            pretrain_batch_size,
        )
        """The local schedule (:class:`~fedhet.modules.flic_schedule.FLICSchedule`)."""

    @property
    def uses_anchors(self) -> bool:
        """Whether anything depends on the anchors (otherwise nothing about them is uploaded)."""
        return bool(self.lambda_align or self.lambda_anchor or self.pretrain_epochs or self.realign_epochs)

    # ---------------------------------------------------------------- layers
    def build_body(self, spec: ClientSpec) -> tuple[nn.Module, int]:
        r"""``embed`` (:math:`\phi_i` for this client's input shape) then ``hidden`` (:math:`\alpha`, FLIC-HL only)."""
        mlp_options = (self.hidden_dims, self.embedding_activation, self.dropout)
        width = self.hidden_width if self.variant == "hl" else None
        cnn_options = (self.cnn_fc_activation, self.cnn_dropout)
        return flic_body(type(self).__name__, spec, self.network, self.latent_dim, width, mlp_options, cnn_options)

    def configure_model(self) -> None:
        """Build the network, the anchors (the same on every client, from ``anchor_seed``) and the pre-training flag.

        The anchors are non-persistent buffers: not personal state, they come from the server each round.
        """
        if hasattr(self, "head"):
            return
        super().configure_model()
        means, factors = initial_anchors(
            self.spec.num_classes, self.latent_dim, self.anchor_std, self.anchor_variance, self.anchor_seed,
            factors=self.learn_covariance,
        )  # fmt: skip
        self.register_buffer("anchor_means", means, persistent=False)
        if factors is not None:
            self.register_buffer("anchor_factors", factors, persistent=False)
        self.register_buffer("pretrained", torch.zeros((), dtype=torch.bool))

    @property
    def embedding(self) -> nn.Module:
        r""":math:`\phi_i`, the client's personal embedding (``body.embed``)."""
        return self.body.get_submodule("embed")

    @property
    def hidden(self) -> nn.Module:
        r""":math:`\alpha`, FLIC-HL's shared layer (``body.hidden``; an identity for FLIC-Class)."""
        return self.body.get_submodule("hidden")

    def anchor_factors_or_none(self) -> Tensor | None:
        """:math:`L_c`, shape ``(C, k, k)``, or ``None`` for fixed covariances."""
        return self.anchor_factors if self.learn_covariance else None

    def classify(self, z: Tensor) -> Tensor:
        r"""Class logits ``(B, C)`` of latent vectors ``(B, k)``: :math:`\beta_i(\alpha(z))`."""
        return cast(Tensor, self.head(self.hidden(z)))

    # ---------------------------------------------------------------- the loss terms
    def alignment_loss(
        self,
        z: Tensor,
        y: Tensor,
        means: Tensor | None = None,
        factors: Tensor | None = None,
        mask: Tensor | None = None,
        noise: Tensor | None = None,
    ) -> Tensor:
        r""":math:`\sum_{c \in P(B)} W_2^2(\mu_c, \mathcal{N}(\hat m_c, \hat S_c))` for embeddings ``z`` ``(B, k)``.

        :meth:`AnchorTerms.alignment <fedhet.modules.flic_terms.AnchorTerms.alignment>` to the module's anchors, or to
        ``means`` (``(C, k)``) and ``factors`` (``(C, k, k)``, learned covariances only) when given, e.g. a client's
        local copy that is being updated.
        """
        means = self.anchor_means if means is None else means
        factors = self.anchor_factors_or_none() if factors is None else factors
        return self.terms.alignment(z, y, means, factors, mask, noise)

    def step_draws(self, batch: Sequence[Tensor], phase: str | None) -> tuple[Tensor, ...]:
        """The batch ``(x, y)`` with its step's draws: ``(x, y, noise, align_noise, objective_noise)``.

        :meth:`StepTerms.draws <fedhet.modules.flic_steps.StepTerms.draws>` for this client and its anchor copy.
        """
        objective = self.participation.engine_copy(self) is not None
        return self.steps.draws(batch, phase, self.spec.num_classes, self.anchor_means.dtype, objective)

    def masked_loss(self, batch: Sequence[Tensor], mask: Tensor) -> Tensor:
        """The loss of :meth:`loss_terms` on a batch completed by :meth:`step_draws`, over its rows where ``mask``."""
        return self.loss_terms(batch, mask).loss

    def stacking(self) -> Stacking | None:
        """Every option stacks (hooks per client, keeping :data:`~fedhet.modules.flic_steps.CLIENT_ATTRIBUTES`)."""
        return Stacking(client_attributes=CLIENT_ATTRIBUTES, draws=self.step_draws)

    def loss_terms(self, batch: Sequence[Tensor], mask: Tensor | None = None) -> _Terms:
        r"""The step's loss, the one entry of both paths: on the batch, or on its real rows ``mask`` (a stack's).

        ``batch`` is ``(x, y)`` (``training_step``: every row real, the anchor terms evaluate the batch's classes
        only, and their draws are made here after the forward pass), or ``(x, y, noise, align_noise,
        objective_noise)`` completed by :meth:`step_draws` (under ``vmap``, padded: all :math:`C` classes over a
        presence mask); the terms are :meth:`StepTerms.loss <fedhet.modules.flic_steps.StepTerms.loss>`'s. When the
        engine steps the anchor copy, its objective (:meth:`CodeAnchorRule.objective
        <fedhet.modules.flic_anchor_rules.CodeAnchorRule.objective>`) joins the loss as ``a - a.detach()``: its
        gradient reaches the copy only, and the loss's value (the one reported) stays the model's.
        """
        x, y = batch[0], batch[1]
        noise, align_noise, objective_noise = (None, None, None) if len(batch) == 2 else tuple(batch[2:5])
        z = self.embedding(x)
        anchors = (self.anchor_means, self.anchor_factors_or_none())
        loss, align = self.steps.loss(self._phase, self.classify, z, y, anchors, mask, noise, align_noise)
        if self._phase in ALIGNMENT_PHASES:
            return _Terms(loss, align, z)
        anchor = self.participation.objective(self, z, y, mask, objective_noise)
        if anchor is not None:
            loss = loss + (anchor - anchor.detach())
        return _Terms(loss, align, z)

    # ---------------------------------------------------------------- local schedule
    def set_round(self, round_idx: int, rounds: int) -> None:
        """Tell the module which federation round it trains (for the round-dependent schedule switches)."""
        self.round_idx = round_idx
        self.final_round = round_idx == rounds - 1

    def local_phases(self) -> list[LocalPhase]:
        """This round's phases (:meth:`~fedhet.modules.flic_schedule.FLICSchedule.local`)."""
        return self.schedule.local(self._optimizers_stepped, self.round_idx, self.final_round)

    def preparation_phases(self) -> list[LocalPhase]:
        """Pre-training or re-alignment (:meth:`~fedhet.modules.flic_schedule.FLICSchedule.preparation`)."""
        return self.schedule.preparation(bool(self.pretrained))

    def new_client_phases(self) -> list[LocalPhase]:
        """A new client's phases (:meth:`~fedhet.modules.flic_schedule.FLICSchedule.new_client`, Supplement S1.4)."""
        return self.schedule.new_client(self._optimizers_stepped)

    @property
    def _optimizers_stepped(self) -> int | tuple[int, ...]:
        """What a local phase steps: the model's optimizer, and the anchor copy's with the code's anchor rule."""
        return (0, 2) if self.code_anchor_update else 0

    def set_local_phase(self, phase: LocalPhase | None) -> None:
        """Remember the phase (recording a preparation phase's losses), then freeze as the base does."""
        self.participation.enter(self, phase)
        self._phase = None if phase is None else phase.name
        super().set_local_phase(phase)

    def configure_optimizers(self) -> Any:
        r"""Adam at ``lr``; ``weight_decay`` on the weight matrices of :math:`\alpha` and :math:`\beta_i` only.

        Under the engine (a :class:`~fedhet.core.LocalTraining` handed over) also the Adam of the preparation phases
        (optimizer 1, over :math:`\phi_i`) and, with ``anchor_update="code"``, the Adam of a fresh local copy of the
        received anchors (optimizer 2); a plain Trainer gets the first alone (:mod:`~fedhet.modules.flic_optimizers`).
        """
        model = model_adam(self, self.lr, self.head_weight_decay)
        if self.local_training is None:
            return model
        anchor_copy = partial(self.participation.copy, self) if self.code_anchor_update else None
        return engine_optimizers(model, self.embedding, self.pretrain_lr, anchor_copy)

    @property
    def code_anchor_update(self) -> bool:
        """Whether the client updates a local copy of the anchors during local training (``anchor_update="code"``)."""
        return self.uses_anchors and self.anchor_update == "code"

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        r"""Cross-entropy, plus :math:`\lambda_1 W_2^2` (not in the representation phase) and :math:`\lambda_2` CE.

        :meth:`loss_terms` on the batch's classes only, its draws made after the forward pass (the alignment term alone
        in a preparation phase); then :meth:`~fedhet.modules.flic_participation.Participation.step`.
        """
        terms = self.loss_terms(batch)
        self.participation.step(self, terms.loss, terms.align, terms.z, batch[1])
        return terms.loss

    # ---------------------------------------------------------------- pre-training
    def pretrain_embedding(self, loader: Iterable[Any], epochs: int) -> list[float]:
        r"""Minimise :meth:`alignment_loss` over :math:`\phi_i` alone (Adam, ``pretrain_lr``) for ``epochs`` epochs.

        Returns:
            the mean alignment loss of each epoch (also kept in :attr:`pretrain_history`).

        """
        self.set_local_phase(None)
        self.pretrain_history = pretrain_embedding(
            self.embedding, self.alignment_loss, loader, epochs, self.pretrain_lr, self.device
        )
        return self.pretrain_history

    def on_train_start(self) -> None:
        """Prepare the participation (:meth:`~fedhet.modules.flic_participation.Participation.start`)."""
        self.participation.start(self)

    # ---------------------------------------------------------------- anchor update and uploads
    @torch.no_grad()
    def embed_all(self, loader: Iterable[Any]) -> tuple[Tensor, Tensor]:
        """Embeddings ``(N, k)`` (in eval mode) and labels ``(N,)`` of every batch of ``loader``."""
        mode = self.training
        self.eval()
        pairs = [(self.embedding(x.to(self.device)), y.to(self.device)) for x, y in loader]
        self.train(mode)
        return torch.cat([z for z, _ in pairs]), torch.cat([y for _, y in pairs])

    def paper_anchor_step(self, z: Tensor, y: Tensor) -> tuple[Tensor, Tensor | None]:
        """:meth:`PaperAnchorRule.step <fedhet.modules.flic_anchor_rules.PaperAnchorRule.step>` from the anchors.

        Args:
            z: the client's embedded training set, shape ``(N, k)``.
            y: its labels, shape ``(N,)``.

        """
        return self.participation.paper_rule.step(self.classify, self.anchor_means, self.anchor_factors_or_none(), z, y)

    def on_train_end(self) -> None:
        """Unfreeze everything; compute the client's anchors and put them in the upload."""
        super().on_train_end()
        self.participation.end(self)

    def client_statistics(self) -> dict[str, Tensor]:
        """The client's anchors after local training (see the class docstring)."""
        return dict(self._upload)

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """FLIC's anchors after local training and its logged losses (:func:`~fedhet.callbacks.flic.flic_upload`)."""
        return flic_upload(
            spec.num_classes,
            self.latent_dim,
            anchors=self.uses_anchors,
            learn_covariance=self.learn_covariance,
            holders_only=self.anchor_holders_only,
            dtype=self.anchor_means.dtype if self.uses_anchors else torch.float32,
        )

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """Take the server's averaged anchors."""
        if GLOBAL_MEANS in statistics:
            self.anchor_means.copy_(statistics[GLOBAL_MEANS])
        if self.learn_covariance and GLOBAL_FACTORS in statistics:
            self.anchor_factors.copy_(statistics[GLOBAL_FACTORS])

    def configure_callbacks(self) -> list[Callback]:
        """:class:`~fedhet.callbacks.AnchorUpdate`, which also tells the module its round."""
        return [
            AnchorUpdate(
                weighting=self.anchor_weighting,
                holders_only=self.anchor_holders_only,
                covariance_aggregation=self.covariance_aggregation,
            )
        ]


class HetFedRep(FLIC):
    """FLIC-HL without alignment: no anchors, no pre-training, the shared hidden layer trained from round 0.

    The paper's "HetFedRep" baseline (Rakotomamonjy et al., TMLR 2024, section 6): the same personal embeddings and
    FedRep model on the latent space, but nothing makes the clients' latent spaces agree.

    Args:
        **kwargs: the :class:`FLIC` arguments other than ``variant``, ``lambda_align``, ``lambda_anchor``,
            ``pretrain_epochs`` and ``realign_epochs``.

    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            variant="hl", lambda_align=0.0, lambda_anchor=0.0, pretrain_epochs=0, realign_epochs=0, **kwargs
        )


class HetLocal(FLIC):
    """The "Local" baseline on FLIC's networks: each client trains its own embedding and linear head, sharing nothing.

    Args:
        **kwargs: the :class:`FLIC` arguments other than ``variant``, ``lambda_align``, ``lambda_anchor``,
            ``pretrain_epochs`` and ``realign_epochs``.

    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            variant="class", lambda_align=0.0, lambda_anchor=0.0, pretrain_epochs=0, realign_epochs=0, **kwargs
        )
