r"""Global Layers: partial personalisation for tabular clients with their own features and their own classes.

Client :math:`k` of :math:`K` holds :math:`n_k` labelled rows with its own :math:`d_k` columns and its own
:math:`C_k` classes; nothing needs to overlap between clients. Its model is a composition of three parts,

.. math::

    f_k = h_k \circ g \circ \phi_k, \qquad
    \phi_k : \mathbb{R}^{d_k} \to \mathbb{R}^{4S}, \quad
    g : \mathbb{R}^{4S} \to \mathbb{R}^{2S}, \quad
    h_k : \mathbb{R}^{2S} \to \mathbb{R}^{C_k},

where the input part :math:`\phi_k` (per-column entity embedding, transformer blocks across the feature tokens,
then ``layer1``) and the head :math:`h_k` (``layer5``, ``norm_out``, ``head``; one logit for two classes) are
**local**: they never leave the client, and their shapes depend on its columns and classes. The middle layers
:math:`g` (``layer2``, ``layer3``, ``layer4`` by default; :data:`GLOBAL_CANDIDATES` lists those whose shapes depend
on no client) are the **global layers**: the same width :math:`S` everywhere, shared by name and averaged. Writing
:math:`\theta_g` for their parameters and :math:`\theta_k` for client :math:`k`'s local ones, the federation
minimises

.. math::

    \min_{\theta_g, \theta_1, \dots, \theta_K} \; \sum_{k=1}^{K} \frac{1}{K}
    \frac{1}{n_k} \sum_{i=1}^{n_k} \ell\big(h_k(g(\phi_k(x_i))), y_i\big),

with :math:`\ell` the binary cross-entropy on one logit (two classes) or the cross-entropy on :math:`C_k` logits.
The weights are uniform, :math:`1/K`, because batch alignment gives every client the same number :math:`B` of AdamW
steps per epoch (batch size :math:`\lfloor n_k / B \rfloor`), whatever its :math:`n_k`. After the steps of a round,
every client's global layers are replaced by their uniform mean (batch-norm running statistics stay local),

.. math::

    \theta_g^{(k)} \leftarrow \bar\theta_g = \frac{1}{K} \sum_{j=1}^{K} \theta_g^{(j)},

after every step (``aggregate_every="step"``, the paper's §3.4) or once per epoch (``"epoch"``, the authors'
code). Each client's AdamW state, moments of the global parameters included, is kept across averagings. Setting
the global modules to none gives the Local baseline, to every module but the first the reference's FedAvg
(:class:`GlobalLayers` says how).

Paper: Yazan Obeidi, "Global Layers: Non-IID Tabular Federated Learning", arXiv:2305.19290, 2023; reference code at
github.com/transferFL/gl, whose architecture this module follows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection

from fedhet.core import ClientSpec, LocalPhase, Stacking
from fedhet.modules.base import FederatedModule
from fedhet.modules.metrics import ClientMetric
from fedhet.plugins import Aggregator, WeightedMean

BNMode = Literal["frozen_stats", "train"]
AggregateEvery = Literal["step", "epoch"]
LabelSpace = Literal["client", "federation"]

GLOBAL_CANDIDATES: tuple[str, ...] = ("layer2", "layer3", "layer4", "layer5", "norm_out")
"""Modules whose shapes do not depend on the client's columns or classes: what may be global."""

MODULE_ORDER: tuple[str, ...] = ("input_norm", "embedding", "blocks", "layer1", *GLOBAL_CANDIDATES, "head")
"""Every top-level module of :class:`GlobalLayers`, input to output (``input_norm`` only with ``input_norm=True``)."""


class EntityEmbedding(nn.Module):
    """One ``Linear(1, E)`` per column, stacked to tokens, then ``BatchNorm1d(F)`` over the feature axis.

    Shapes: ``(B, F) -> (B, F, E)``. Parameters: ``2FE`` (weights and biases) + ``2F`` (norm).
    """

    def __init__(self, num_features: int, embed_dim: int) -> None:
        super().__init__()
        # ``Linear(1, E)``'s default init: kaiming-uniform(a=sqrt(5)) and bias with fan_in = 1, i.e. U(-1, 1)
        self.weight = nn.Parameter(torch.empty(num_features, embed_dim).uniform_(-1.0, 1.0))
        self.bias = nn.Parameter(torch.empty(num_features, embed_dim).uniform_(-1.0, 1.0))
        self.norm = nn.BatchNorm1d(num_features)

    def forward(self, x: Tensor) -> Tensor:
        """Tokens ``(B, F, E)`` of features ``(B, F)``."""
        return cast(Tensor, self.norm(x.unsqueeze(-1) * self.weight + self.bias))


class TransformerBlock(nn.Module):
    """Norm, bias-free multi-head attention across feature tokens with a residual, then a residual feed-forward.

    ``x = BN(x); x = MHA(x) + x; x = SELU(W2(SELU(W1(BN(x))) [* W3(x)])) + x``; the gate ``W3`` only when ``gated``.
    Shapes: ``(B, F, E) -> (B, F, E)``. Parameters: ``4E^2 + E^2 (+ E^2/2 gated) + 4F``.
    """

    def __init__(self, num_features: int, embed_dim: int, num_heads: int, gated: bool) -> None:
        super().__init__()
        self.norm_attn = nn.BatchNorm1d(num_features)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, bias=False, batch_first=True)
        self.norm_ff = nn.BatchNorm1d(num_features)
        self.w1 = nn.Linear(embed_dim, embed_dim // 2, bias=False)
        self.w2 = nn.Linear(embed_dim // 2, embed_dim, bias=False)
        self.w3 = nn.Linear(embed_dim, embed_dim // 2, bias=False) if gated else None

    def forward(self, x: Tensor) -> Tensor:
        """Tokens ``(B, F, E)`` to tokens ``(B, F, E)``."""
        x = self.norm_attn(x)
        x = self.attn(x, x, x, need_weights=False)[0] + x
        hidden = F.selu(self.w1(self.norm_ff(x)))
        if self.w3 is not None:
            hidden = hidden * self.w3(x)
        return F.selu(self.w2(hidden)) + x


class DenseLayer(nn.Module):
    """``SELU(Linear(BN(x)))``: ``(B, d_in) -> (B, d_out)``, ``2 d_in + d_in d_out + d_out`` parameters."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(in_dim)
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_dim) -> (B, out_dim)``."""
        return F.selu(self.linear(self.norm(x)))


class ResidualFeedForward(nn.Module):
    """``x + W2(SELU(W1(BN(x))) [* W3(x)])`` with hidden width ``hidden``; ``(B, d) -> (B, d)``.

    ``W1`` and ``W2`` have biases; the gate ``W3`` (only when ``gated``) has none.
    """

    def __init__(self, dim: int, hidden: int, gated: bool) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(dim)
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)
        self.w3 = nn.Linear(dim, hidden, bias=False) if gated else None

    def forward(self, x: Tensor) -> Tensor:
        """``(B, dim) -> (B, dim)``."""
        hidden = F.selu(self.w1(self.norm(x)))
        if self.w3 is not None:
            hidden = hidden * self.w3(x)
        return cast(Tensor, x + self.w2(hidden))


def aligned_batch_size(client_id: str, num_train: int, batches_per_epoch: int) -> int:
    """BatchAlignedFedAvg's batch size ``floor(n_k / B)`` for a client of ``num_train`` rows (the paper's §3.4).

    Raises:
        ValueError: naming the client and the field, when it has fewer than ``B`` rows.

    Example:
        >>> aligned_batch_size("cleveland", 182, 5)
        36

    """
    if num_train < batches_per_epoch:
        raise ValueError(
            f"GlobalLayers: client '{client_id}' has {num_train} training rows, fewer than"
            f" batches_per_epoch={batches_per_epoch}"
        )
    return num_train // batches_per_epoch


class GlobalLayers(FederatedModule):
    """The Global Layers model of one client: private input part, global middle layers, private head.

    ``x (B, F) -> [BN_F] -> entity embedding (B, F, E) -> num_blocks transformer blocks -> flatten (B, F*E)
    -> layer1 (B, 4S) -> layer2 (B, 4S) -> layer3 (B, 2S) -> layer4 (B, 2S) -> layer5 (B, S) -> norm_out -> head``,
    with ``head`` giving one logit for a two-class client and ``C_k`` logits otherwise. Layers 1, 3 and 5 are
    ``SELU(Linear(BN(x)))``; layers 2 and 4 residual feed-forward blocks with hidden width ``S`` and ``S/2``. The
    modules named in ``global_modules`` are shared by name (parameters only: batch-norm running statistics stay
    personal) and averaged uniformly; everything else is personal.

    The three methods of the paper are this module with different settings:

    * **GL**: ``global_modules=("layer2", "layer3", "layer4")``, ``label_space="client"``;
    * **Local**: ``global_modules=()``;
    * **FedAvg**: ``global_modules=GlobalLayers.all_but_first()`` (every module but the first, as the reference code
      does), ``label_space="federation"``, on a federation whose clients share one column layout (zero-filled union,
      :class:`fedhet.datamodules.aligned.AlignedFederation` with ``layout="union"``).

    BatchAlignedFedAvg (every client takes the same number ``B`` of optimizer steps per round with batch size
    ``floor(n_k / B)``, i.e. one local pass, then a uniform mean) is this module under the unchanged engine with
    ``batches_per_epoch=B``: its local phase takes exactly ``B`` steps of shuffled batches of
    :func:`aligned_batch_size` rows (``LocalPhase(steps=B, batch_size=floor(n_k / B))``, from the client's
    description), its aggregator is ``WeightedMean("uniform")``, and it keeps each client's AdamW state across rounds.
    A client with fewer than ``B`` training rows is refused before any training. Under a plain ``lightning.Trainer``
    (one client), which iterates the client datamodule's own loader, set that loader's batch size yourself and cap
    the steps: ``client.batch_size = aligned_batch_size(client.spec.client_id, client.spec.num_train, B)`` and
    ``Trainer(limit_train_batches=B)``.

    When the global layers are averaged (``aggregate_every``): the paper (§3.4) averages each time every client has
    made one step on its batch, ``"step"`` (the default); the authors' code averages once per epoch, after all ``B``
    steps, ``"epoch"``. With ``"step"`` one federation round is one batch step, so an epoch is ``B`` rounds, as
    :meth:`rounds_per_epoch` declares: state the length in epochs, ``epochs: 10`` in a ``fedhet fit`` config (the
    shipped ``configs/gl``), or in Python take the trainer's ``rounds`` and ``eval_every`` from
    :func:`fedhet.plugins.rounds.epochs.epoch_schedule` (``epoch_schedule(model, epochs=10)`` gives 50 rounds evaluated
    every 5 with ``B = 5``). The engine draws each round's batch from a
    fresh shuffle of the client's rows, so over one epoch of ``"step"`` rounds a row can be drawn twice or not at all,
    where ``"epoch"`` visits ``B * floor(n_k / B)`` distinct rows.

    Labels arrive in the federation's label space; with ``label_space="client"`` the module maps them to the client's
    own classes (those present in its training split, sorted, as a label encoder fitted on it would). An evaluation
    label the client never trained on is a negative for every class and is ignored by balanced accuracy.

    Metrics (per client, raw logits): ``auroc``, ``auprc`` (one-vs-rest macro; a class the split lacks scores 0.5 /
    0), ``auroc_present``/``auprc_present`` (such classes skipped), ``balanced_accuracy``, ``acc`` (accuracy, named as
    in every other fedhet module; a binary head predicts 1 where its logit is at least ``threshold``; also logged
    under 0.1.0's name ``accuracy`` in the 0.2.x releases) and ``loss``.

    Args:
        global_modules: names of the top-level modules that are global (a subset of :data:`GLOBAL_CANDIDATES`, or
            any of :data:`MODULE_ORDER` when every client has the same columns and classes).
        embed_dim: entity-embedding width ``E``.
        num_heads: attention heads (``E`` divisible by it).
        num_blocks: transformer blocks.
        width: MLP width ``S``; ``None`` makes it ``F * E`` (the Covertype model), an int fixes it whatever ``F`` is
            (the heart model: 128, i.e. a "common embed dim" of 8 times ``E``).
        gated: gate the feed-forward blocks (Covertype model) or not (heart model).
        input_norm: batch-normalise the raw features first (Covertype model).
        bn_mode: ``"frozen_stats"`` keeps every batch norm in inference mode during training too (the reference's
            behaviour: a learnable affine map over the initial statistics); ``"train"`` is textbook batch norm.
        label_space: ``"client"`` (the client's own classes) or ``"federation"`` (every class of the federation).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        threshold: logit threshold of a binary head's predicted class (0.5 as the reference; 0 is probability 1/2).
        batches_per_epoch: ``B`` of BatchAlignedFedAvg (5 for heart, 10 for Covertype in the paper); ``None`` trains
            with the datamodule's batch size for the trainer's ``local_epochs``/``local_steps``.
        aggregate_every: with ``batches_per_epoch`` set, ``"step"`` (the paper: one step per round, averaged after
            every step) or ``"epoch"`` (the reference code: ``B`` steps per round, averaged once).

    Example:
        >>> model = GlobalLayers(width=128)
        >>> model.setup_client(ClientSpec("cleveland", (13,), num_classes=2, classes=(0, 1)))
        >>> model.configure_model()
        >>> sum(p.numel() for p in model.parameters()), model(torch.zeros(4, 13)).shape
        (448339, torch.Size([4, 1]))

    """

    keep_optimizer_state = True
    reuse_optimizers = True  # one AdamW over the parameters: reset and reloaded with each client's kept state

    label_index: Tensor  # a buffer: federation label -> head class (-1: none)

    def __init__(
        self,
        global_modules: Sequence[str] = ("layer2", "layer3", "layer4"),
        embed_dim: int = 16,
        num_heads: int = 8,
        num_blocks: int = 6,
        width: int | None = None,
        gated: bool = False,
        input_norm: bool = False,
        bn_mode: BNMode = "frozen_stats",
        label_space: LabelSpace = "client",
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        threshold: float = 0.5,
        batches_per_epoch: int | None = None,
        aggregate_every: AggregateEvery = "step",
    ) -> None:
        super().__init__()
        if aggregate_every not in ("step", "epoch"):
            raise ValueError(
                f"GlobalLayers: field 'aggregate_every' must be 'step' or 'epoch', got {aggregate_every!r}"
            )
        if batches_per_epoch is not None and batches_per_epoch < 1:
            raise ValueError(f"GlobalLayers: field 'batches_per_epoch' must be >= 1 or null, got {batches_per_epoch}")
        unknown = [name for name in global_modules if name not in MODULE_ORDER]
        if unknown:
            raise ValueError(
                f"GlobalLayers: field 'global_modules' names unknown modules {unknown}; use {MODULE_ORDER}"
            )
        if embed_dim < 2 or embed_dim % 2 or embed_dim % num_heads:
            raise ValueError(
                f"GlobalLayers: field 'embed_dim' must be even and divisible by num_heads={num_heads}, got {embed_dim}"
            )
        if width is not None and (width < 2 or width % 2):
            raise ValueError(f"GlobalLayers: field 'width' must be an even integer >= 2 or null, got {width}")
        if bn_mode not in ("frozen_stats", "train"):
            raise ValueError(f"GlobalLayers: field 'bn_mode' must be 'frozen_stats' or 'train', got {bn_mode!r}")
        if label_space not in ("client", "federation"):
            raise ValueError(f"GlobalLayers: field 'label_space' must be 'client' or 'federation', got {label_space!r}")
        if lr <= 0 or weight_decay < 0:
            raise ValueError(f"GlobalLayers: 'lr' must be positive and 'weight_decay' >= 0, got {lr}, {weight_decay}")
        self.save_hyperparameters()
        self.global_modules = tuple(global_modules)
        self.shared = tuple(f"{name}.*" for name in self.global_modules)
        self.embed_dim, self.num_heads, self.num_blocks = embed_dim, num_heads, num_blocks
        self.width, self.gated, self.use_input_norm = width, gated, input_norm
        self.bn_mode, self.label_space = bn_mode, label_space
        self.lr, self.weight_decay, self.threshold = lr, weight_decay, threshold
        self.batches_per_epoch = batches_per_epoch
        self.aggregate_every = aggregate_every

    @staticmethod
    def all_but_first(input_norm: bool = False) -> tuple[str, ...]:
        """The modules the reference's FedAvg averages: all but the first (``input_norm``, else ``embedding``)."""
        modules = MODULE_ORDER if input_norm else tuple(name for name in MODULE_ORDER if name != "input_norm")
        return modules[1:]

    # ---------------------------------------------------------------- the client
    def client_classes(self, spec: ClientSpec) -> tuple[int, ...]:
        """The federation labels the client's head predicts, in head order."""
        return tuple(spec.classes) if self.label_space == "client" else tuple(range(spec.num_classes))

    def client_signature(self, spec: ClientSpec) -> Hashable:
        """Clients share a module instance only if they have the same columns and the same head classes.

        The engine reads every client's signature before any training, so a client with fewer training rows than
        ``batches_per_epoch`` is refused here (:func:`aligned_batch_size`).
        """
        if self.batches_per_epoch is not None:
            aligned_batch_size(spec.client_id, spec.num_train, self.batches_per_epoch)
        return (spec.input_shape, self.client_classes(spec))

    def configure_model(self) -> None:
        """Build the client's layers from :attr:`spec` (once); see the class docstring for the shapes."""
        if hasattr(self, "head"):
            return
        spec = self.spec
        if len(spec.input_shape) != 1:
            raise ValueError(
                f"GlobalLayers: client '{spec.client_id}' has features of shape {spec.input_shape}; needs (F,)"
            )
        classes = self.client_classes(spec)
        if len(classes) < 2:
            raise ValueError(
                f"GlobalLayers: client '{spec.client_id}' has classes {classes} in its training split; a head needs 2+"
            )
        num_features, e = spec.input_shape[0], self.embed_dim
        s = self.width if self.width is not None else num_features * e
        self.classes = classes
        self.num_outputs = 1 if len(classes) == 2 else len(classes)
        index = torch.full((spec.num_classes,), -1, dtype=torch.long)
        index[list(classes)] = torch.arange(len(classes))
        self.register_buffer("label_index", index, persistent=False)  # federation label -> head class (-1: none)

        self.input_norm = nn.BatchNorm1d(num_features) if self.use_input_norm else None
        self.embedding = EntityEmbedding(num_features, e)
        self.blocks = nn.Sequential(
            *(TransformerBlock(num_features, e, self.num_heads, self.gated) for _ in range(self.num_blocks))
        )
        self.layer1 = DenseLayer(num_features * e, 4 * s)
        self.layer2 = ResidualFeedForward(4 * s, s, self.gated)
        self.layer3 = DenseLayer(4 * s, 2 * s)
        self.layer4 = ResidualFeedForward(2 * s, s // 2, self.gated)
        self.layer5 = DenseLayer(2 * s, s)
        self.norm_out = nn.BatchNorm1d(s)
        self.head = nn.Linear(s, self.num_outputs)
        self._buffer_names = frozenset(name for name, _ in self.named_buffers())
        self.train(self.training)  # apply bn_mode to the new layers

    def is_shared(self, name: str) -> bool:
        """Parameters of the global modules; batch-norm running statistics are never communicated."""
        return name not in getattr(self, "_buffer_names", ()) and super().is_shared(name)

    # ---------------------------------------------------------------- forward and losses
    def train(self, mode: bool = True) -> GlobalLayers:
        """Set the training mode; with ``bn_mode="frozen_stats"`` every batch norm stays in inference mode."""
        super().train(mode)
        if self.bn_mode == "frozen_stats":
            for module in self.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape ``(B, 1)`` (two classes) or ``(B, C_k)`` for features of shape ``(B, F)``."""
        if self.input_norm is not None:
            x = self.input_norm(x)
        tokens = self.blocks(self.embedding(x))
        hidden = self.layer1(tokens.flatten(1))
        hidden = self.layer4(self.layer3(self.layer2(hidden)))
        return cast(Tensor, self.head(self.norm_out(self.layer5(hidden))))

    def head_targets(self, y: Tensor) -> Tensor:
        """Federation labels ``(B,)`` to head classes ``(B,)`` (``-1`` for a class the head does not have)."""
        return self.label_index[y]

    def loss(self, logits: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
        """BCE-with-logits on a one-logit head (class 1 positive; -1 counts as 0), cross-entropy otherwise."""
        if self.num_outputs == 1:
            return F.binary_cross_entropy_with_logits(logits[:, 0], (target == 1).float(), reduction=reduction)
        return F.cross_entropy(logits, target, ignore_index=-1, reduction=reduction)

    def stacking(self) -> Stacking | None:
        """Its clients train in stacks with the masked mean of :meth:`sample_losses`."""
        return Stacking()

    def sample_losses(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Each sample's loss, shape ``(B,)``; their mean is :meth:`training_step`'s loss.

        (A training label is always one of the client's classes, so no sample is ignored.) It lets clients of one
        architecture train in stacks (``StackedRunner``); their batch norms are in inference mode with
        ``bn_mode="frozen_stats"``, and each client's AdamW state is stacked with theirs.
        """
        x, y = batch
        return self.loss(self(x), self.head_targets(y), reduction="none")

    def _evaluation_step(self, batch: tuple[Tensor, Tensor], stage: str) -> None:
        x, y = batch
        logits, target = self(x), self.head_targets(y)
        metrics = self.evaluation_metrics(stage)
        for name, metric in metrics.items():
            if name == "loss":
                losses = self.loss(logits, target, reduction="none")
                metric.update(losses[target >= 0] if self.num_outputs > 1 else losses)
            else:
                metric.update(logits, target)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the validation metrics."""
        self._evaluation_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the test metrics."""
        self._evaluation_step(batch, "test")

    def configure_metrics(self, stage: str) -> MetricCollection:
        """The per-client metrics (see the class docstring), over the head's classes."""
        num_head_classes = len(self.classes)
        return MetricCollection(
            {
                "auroc": ClientMetric("auroc", num_head_classes),
                "auroc_present": ClientMetric("auroc", num_head_classes, absent="skip"),
                "auprc": ClientMetric("auprc", num_head_classes),
                "auprc_present": ClientMetric("auprc", num_head_classes, absent="skip"),
                "balanced_accuracy": ClientMetric("balanced_accuracy", num_head_classes, threshold=self.threshold),
                "acc": ClientMetric("accuracy", num_head_classes, threshold=self.threshold),
                # 0.1.0's name of ``acc``, kept for the 0.2.x releases only (CHANGELOG, 0.2.0): read ``acc``
                "accuracy": ClientMetric("accuracy", num_head_classes, threshold=self.threshold),
                "loss": MeanMetric(sync_on_compute=False),
            },
            compute_groups=False,
        )

    # ---------------------------------------------------------------- federation
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One AdamW over all the client's parameters; the engine keeps its state across rounds."""
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def rounds_per_epoch(self) -> int:
        """Rounds per epoch: ``B`` with ``aggregate_every="step"`` (one step per round), else 1 (one pass per round)."""
        if self.batches_per_epoch is not None and self.aggregate_every == "step":
            return self.batches_per_epoch
        return 1

    def configure_aggregator(self) -> Aggregator:
        """Uniform mean of the global layers (batch alignment gives every client the same number of steps)."""
        return WeightedMean("uniform")

    def local_phases(self) -> list[LocalPhase]:
        """One phase training everything: the trainer's schedule on the client's own batches, or batch-aligned.

        Batch-aligned: ``B`` steps (``"epoch"``) or one (``"step"``) on shuffled batches of ``floor(n_k / B)`` of the
        client's rows, drawn as the client's own loader draws them (one permutation a pass, from the seeded RNG).
        """
        if self.batches_per_epoch is None:
            return [LocalPhase("local")]
        batch_size = aligned_batch_size(self.spec.client_id, self.spec.num_train, self.batches_per_epoch)
        steps = 1 if self.aggregate_every == "step" else self.batches_per_epoch
        return [LocalPhase("local", steps=steps, batch_size=batch_size)]

    def num_parameters(self, part: Literal["all", "global", "private"] = "all") -> int:
        """Number of parameters in total, in the global modules, or in the private ones."""
        params = list(self.named_parameters())
        if part == "global":
            params = [(n, p) for n, p in params if self.is_shared(n)]
        elif part == "private":
            params = [(n, p) for n, p in params if not self.is_shared(n)]
        return sum(math.prod(p.shape) for _, p in params)
