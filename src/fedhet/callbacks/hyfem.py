"""HyFEM's server step: its wire names, its upload declaration and the model matching.

Zhang et al., "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and Implementation", TMLR
2024. A client (:class:`~fedhet.modules.HyFEM`) uploads its whole model as ``hyfem/<parameter name>`` statistics, as
:func:`hyfem_upload` declares; the server's one callback, :class:`ModelMatching`, keeps the full-feature server model
and sends each client its anchors as ``anchors.<parameter path>`` entries of its per-client payload
(:func:`anchor_key`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.figures import objective
from fedhet.core import ClientUpdate, Federation, GlobalData, ServerAccess, ServerState, TensorSpec, UploadDeclaration
from fedhet.core.seeding import derive_seed, seeded
from fedhet.functional.aggregation import weighted_mean
from fedhet.functional.matching import Classifier, CostMode, matching_objective, model_matching, project_classifier

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STAT_PREFIX = "hyfem/"
"""Prefix of the uploaded statistics: ``hyfem/<parameter name>`` for every parameter of the client model."""
EXTRACTORS = "body.extractors."
"""Prefix of the extractor parameters (:math:`\\Theta`); the others form the classifier (:math:`w`)."""
CLASSIFIER = ("body.hidden.weight", "body.hidden.bias", "head.weight", "head.bias")
"""The classifier's parameters in :class:`~fedhet.functional.matching.Classifier` order ``(w1, b1, w2, b2)``."""
ANCHORS = "anchors."
"""Prefix of the per-client payload's entries: a client's anchors, ``anchors.<parameter path>``."""


def anchor_key(name: str) -> str:
    """The state-dict name of HyFEM's anchor (server view) of parameter ``name``, e.g. ``anchors.head/weight``.

    Example:
        >>> anchor_key("head.weight")
        'anchors.head/weight'

    """
    return ANCHORS + name.replace(".", "/")


def hyfem_upload(parameters: Mapping[str, TensorSpec]) -> UploadDeclaration:
    """What a HyFEM client uploads: every parameter of its model (``parameters``, by name) as ``hyfem/<name>``.

    Example:
        >>> hyfem_upload({"head.bias": TensorSpec((3,))}).statistics
        {'hyfem/head.bias': TensorSpec(shape=(3,), dtype=torch.float32)}

    """
    return UploadDeclaration({STAT_PREFIX + name: spec for name, spec in parameters.items()})


@runtime_checkable
class BlockBody(Protocol):
    """What the server model's body must offer: a module over feature blocks that locates each block's features."""

    def feature_columns(self, blocks: Sequence[str]) -> Tensor:
        """Positions, in the body's concatenated extractor outputs, of the features of ``blocks`` (in that order)."""
        ...


BodyFactory = Callable[[Mapping[str, int], Sequence[int], int], nn.Module]
"""Builds a body from ``(block widths, extractor widths, hidden width)``, e.g. :class:`~fedhet.modules.HybridBody`."""


class ModelMatching(FederatedCallback):
    r"""Holds HyFEM's server model and runs its server step each round (Zhang et al., TMLR 2024, algorithms 1-3).

    The server model has an extractor for every feature block of the federation (the datamodule's ``block_widths``
    when it has them, else every block some client holds, in order of appearance) and a classifier over all of them.
    After the clients' uploads (``hyfem/<name>`` statistics of :class:`~fedhet.modules.HyFEM`):

    1. each block's extractor becomes the :math:`p`-weighted mean of its holders' extractors (eq. 10's closed form,
       :func:`~fedhet.functional.weighted_mean`); blocks nobody uploaded stay unchanged;
    2. client hidden neurons are re-matched to server neurons and the classifier becomes the matched average
       (:func:`~fedhet.functional.model_matching`); uncovered coordinates stay unchanged;
    3. each client is sent its anchors, :math:`P_m\Theta_0` and :math:`\Pi_m w_0`, through ``server_state.per_client``.

    :math:`p_m` is proportional to the client's number of training samples. Before the first round the server model
    is initialised (seeded from the run's seed) and every client gets the identity matching. After each evaluation
    the server model is evaluated on the datamodule's full-feature samples (``global_dataloader(stage)``, when it has
    one), adding ``<stage>/global_acc`` and ``<stage>/global_loss`` to the metrics. Logged per round:
    ``hyfem/matching_seconds``, ``hyfem/objective`` (the classifier part of eq. 6) and ``hyfem/rematched`` (clients
    whose matching changed).

    Server state: writes every client's ``anchors.*`` per-client payload entries; no broadcast statistic.

    Args:
        body: builds the server model's body from ``(block widths, extractor widths, hidden width)``: the clients'
            network class (:class:`~fedhet.modules.HybridBody`, which :class:`~fedhet.modules.HyFEM` passes), so
            the server's extractors and classifier are shaped and named as the clients'.
        extractor_dims: hidden widths of every block's extractor (as the clients').
        hidden_dim: the clients' classifier hidden width :math:`H_m`.
        server_hidden_dim: the server's :math:`H_0`; ``hidden_dim`` when ``None``.
        matching: re-match neurons; ``False`` keeps the identity matching.
        passes: matching passes per round; twice the number of uploading clients when ``None``.
        cost: ``"exact"``, ``"incoming"`` or ``"descent"`` (:func:`~fedhet.functional.matching_cost`).

    """

    server_access = ServerAccess(per_client=(ANCHORS + "*",))

    def __init__(
        self,
        body: BodyFactory,
        extractor_dims: Sequence[int] = (32,),
        hidden_dim: int = 64,
        server_hidden_dim: int | None = None,
        matching: bool = True,
        passes: int | None = None,
        cost: CostMode = "exact",
    ) -> None:
        self.body = body
        self.extractor_dims = tuple(extractor_dims)
        self.hidden_dim = hidden_dim
        self.server_hidden_dim = server_hidden_dim or hidden_dim
        self.matching = matching
        self.passes = passes
        self.cost = cost
        self.server: nn.ModuleDict | None = None
        self.perms: dict[str, Tensor] = {}
        self.matching_seconds = 0.0
        self.objective: float | None = None  # the matching objective after the latest round
        self.objective_history: list[tuple[int, float]] = []
        """``(round, value)`` of the matching objective in this ``fit``."""
        self._cols: dict[str, Tensor] = {}
        self._blocks: dict[str, list[str]] = {}
        self._pending: dict[str, Any] | None = None

    # ---------------------------------------------------------------- the server model
    def _ensure_server(self, trainer: Any) -> bool:
        """Build the server model (restoring a loaded state); whether it was freshly initialised."""
        if self.server is not None:
            return False
        datamodule = trainer.datamodule
        specs = datamodule.specs
        self._blocks = {cid: list(spec.block_widths) for cid, spec in specs.items()}
        widths = dict(getattr(datamodule, "block_widths", None) or {})
        for spec in specs.values():
            for name, width in spec.block_widths.items():
                widths.setdefault(name, width)
        num_classes = next(iter(specs.values())).num_classes
        with seeded(derive_seed(trainer.seed, "hyfem", "server")):
            body = self.body(widths, self.extractor_dims, self.server_hidden_dim)
            if not isinstance(body, BlockBody):
                raise TypeError(
                    f"ModelMatching: field 'body' built a {type(body).__name__}, which has no feature_columns(blocks)"
                )
            self.server = nn.ModuleDict({"body": body, "head": nn.Linear(self.server_hidden_dim, num_classes)})
        self._cols = {cid: body.feature_columns(blocks) for cid, blocks in self._blocks.items()}
        if self._pending is not None:
            self.server.load_state_dict(self._pending["server"])
            self.perms = dict(self._pending["perms"])
            self._pending = None
            return False
        self.perms = {cid: torch.arange(self.hidden_dim) for cid in specs}
        return True

    def server_classifier(self) -> Classifier:
        """The server classifier's weights (detached)."""
        state = self._server.state_dict()
        return Classifier(*(state[name].detach().clone() for name in CLASSIFIER))

    @property
    def _server(self) -> nn.ModuleDict:
        if self.server is None:
            raise RuntimeError("ModelMatching: the server model is built when the federation starts")
        return self.server

    def _publish(self, server_state: Any) -> None:
        """Send every client its anchors: the server extractors of its blocks and its matched classifier slice."""
        state = self._server.state_dict()
        classifier = self.server_classifier()
        for cid, blocks in self._blocks.items():
            prefixes = tuple(f"{EXTRACTORS}{block}." for block in blocks)
            payload = {anchor_key(n): v.clone() for n, v in state.items() if n.startswith(prefixes)}
            projected = project_classifier(classifier, self._cols[cid], self.perms[cid])
            payload.update({anchor_key(n): v for n, v in zip(CLASSIFIER, projected, strict=True)})
            server_state.per_client[cid] = payload

    # ---------------------------------------------------------------- hooks
    def on_federation_start(self, trainer: Federation, module: Any) -> None:
        """Initialise the server model and send the clients their first anchors (not after a resume)."""
        self.objective_history = []
        if self._ensure_server(trainer):
            self._publish(trainer.server_state)

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Average extractors per block, match and average classifiers, send the anchors."""
        uploads = [u for u in updates if STAT_PREFIX + CLASSIFIER[0] in u.statistics]
        if not uploads:
            return
        self._ensure_server(trainer)
        total = float(sum(u.num_samples for u in uploads))
        weights = [u.num_samples / total for u in uploads]
        states = [
            {name[len(STAT_PREFIX) :]: v for name, v in u.statistics.items() if name.startswith(STAT_PREFIX)}
            for u in uploads
        ]
        extractors = weighted_mean([{n: v for n, v in s.items() if n.startswith(EXTRACTORS)} for s in states], weights)
        ids = [u.client_id for u in uploads]
        clients = [Classifier(*(s[name] for name in CLASSIFIER)) for s in states]
        cols = [self._cols[cid] for cid in ids]
        start = time.perf_counter()
        classifier, perms = model_matching(
            clients,
            cols,
            [self.perms[cid] for cid in ids],
            weights,
            self.server_classifier(),
            (2 * len(uploads) if self.passes is None else self.passes) if self.matching else 0,
            self.cost,
            torch.Generator().manual_seed(derive_seed(trainer.seed, "hyfem", "matching", round_idx)),
        )
        self.matching_seconds = time.perf_counter() - start
        rematched = sum(not torch.equal(self.perms[cid], perm) for cid, perm in zip(ids, perms, strict=True))
        self.perms.update(zip(ids, perms, strict=True))
        self._server.load_state_dict({**extractors, **dict(zip(CLASSIFIER, classifier, strict=True))}, strict=False)
        self._publish(server_state)
        self.objective = matching_objective(clients, cols, perms, weights, classifier)
        self.objective_history.append((round_idx, self.objective))
        trainer.log_dict(
            {
                "hyfem/matching_seconds": self.matching_seconds,
                "hyfem/objective": self.objective,
                "hyfem/rematched": float(rematched),
            },
            step=round_idx,
        )

    @torch.no_grad()
    def on_evaluation_end(self, trainer: Federation, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """Evaluate the server model on the full-feature samples of ``stage``: ``<stage>/global_acc`` and loss."""
        federation = trainer.datamodule
        loader = federation.global_dataloader(stage) if isinstance(federation, GlobalData) else None
        if not loader:
            return
        self._ensure_server(trainer)
        server = self._server.eval()
        correct, loss, count = 0, 0.0, 0
        for x, y in loader:
            logits = server["head"](server["body"](x))
            correct += int((logits.argmax(1) == y).sum())
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
            count += len(y)
        metrics[f"{stage}/global_acc"] = correct / count
        metrics[f"{stage}/global_loss"] = loss / count

    def figures(self, trainer: Federation, round_idx: int) -> dict[str, Figure]:
        """The matching objective of each round of this ``fit`` (``hyfem_matching_objective``)."""
        if not self.objective_history:
            return {}
        rounds, values = zip(*self.objective_history, strict=True)
        title = "HyFEM model-matching objective"
        return {"hyfem_matching_objective": objective(rounds, values, "matching objective", title)}

    # ---------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The server model and every client's matching."""
        if self.server is None:
            return dict(self._pending or {})
        return {
            "server": {name: v.detach().cpu().clone() for name, v in self.server.state_dict().items()},
            "perms": dict(self.perms),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the server model is rebuilt from it when next needed."""
        self.server = None
        self._pending = dict(state_dict) if state_dict else None
