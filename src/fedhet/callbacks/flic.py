r"""FLIC's server step: its wire names, its upload declaration and the anchor update.

A. Rakotomamonjy, M. Vono, H. J. Medina Ruiz, L. Ralaivola, "Personalised Federated Learning On Heterogeneous Feature
Spaces", TMLR 2024. The module (:class:`~fedhet.modules.FLIC`) uploads its version of the Gaussian anchors
:math:`\mathcal{N}(v_c, L_c L_c^\top)` after local training, as :func:`flic_upload` declares; the server's one callback,
:class:`AnchorUpdate`, broadcasts their barycenter (:func:`~fedhet.functional.gaussian.gaussian_barycenter`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.figures import new_figure, to_2d
from fedhet.core import (
    ClientUpdate,
    Federation,
    RoundAware,
    ServerAccess,
    ServerState,
    TensorSpec,
    UploadDeclaration,
)
from fedhet.functional.gaussian import gaussian_barycenter

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ANCHOR_MEANS = "flic/anchor_means"
"""Uploaded: the client's anchor means :math:`v_c`, ``(C, k)``."""
ANCHOR_FACTORS = "flic/anchor_factors"
"""Uploaded with learned covariances: the client's lower-triangular factors :math:`L_c`, ``(C, k, k)``."""
ANCHOR_COUNTS = "flic/anchor_counts"
"""Uploaded with ``holders_only``: the client's class counts, ``(C,)``."""
GLOBAL_MEANS = "flic/global_anchor_means"
"""Broadcast: the averaged anchor means, ``(C, k)``."""
GLOBAL_FACTORS = "flic/global_anchor_factors"
"""Broadcast with learned covariances: the averaged anchor factors, ``(C, k, k)``."""
METRICS = frozenset({"train/loss", "train/align", "train/pretrain_loss"})
"""The training metrics a FLIC client logs: the loss, the alignment term and the pre-training loss."""


def flic_upload(
    num_classes: int,
    latent_dim: int,
    anchors: bool = True,
    learn_covariance: bool = False,
    holders_only: bool = False,
    dtype: torch.dtype = torch.float32,
) -> UploadDeclaration:
    """What a FLIC client uploads (it shares its other parameters by name).

    Args:
        num_classes: :math:`C`, the federation's classes.
        latent_dim: :math:`k`, the latent space's width.
        anchors: whether any term uses the anchors (nothing is uploaded otherwise: HetFedRep, HetLocal).
        learn_covariance: upload the factors ``(C, k, k)`` besides the means ``(C, k)``.
        holders_only: upload the class counts ``(C,)`` (float32), so that the server averages a class over its
            holders only.
        dtype: of the anchors.

    Example:
        >>> sorted(flic_upload(3, 2, holders_only=True).statistics)
        ['flic/anchor_counts', 'flic/anchor_means']

    """
    if not anchors:
        return UploadDeclaration(metrics=METRICS)
    statistics = {ANCHOR_MEANS: TensorSpec((num_classes, latent_dim), dtype)}
    if learn_covariance:
        statistics[ANCHOR_FACTORS] = TensorSpec((num_classes, latent_dim, latent_dim), dtype)
    if holders_only:
        statistics[ANCHOR_COUNTS] = TensorSpec((num_classes,), torch.float32)
    return UploadDeclaration(statistics, METRICS)


class AnchorUpdate(FederatedCallback):
    r"""Averages the anchors uploaded by a round's participants into the global anchors (FLIC, Alg. 1 / S2).

    For each class :math:`c`, the new anchor is the 2-Wasserstein barycenter of the participants' anchors
    :math:`\mathcal{N}(v_{i,c}, L_{i,c} L_{i,c}^\top)` with weights :math:`\omega_i` normalised over the participants
    (the paper's :math:`\frac{b}{|A|} \sum_{i \in A} \omega_i v_{i,c}` with :math:`\omega_i = 1/b`): the weighted mean
    of the means; with learned covariances, the Bures barycenter of the covariances (``"bures"``, re-factored by
    Cholesky) or the paper's weighted mean of the Cholesky factors (``"cholesky_mean"``). With ``holders_only`` a class
    is averaged over the participants that hold it only (a class nobody holds keeps the equal-weight mean, i.e. its
    unchanged value). Reads the uploads' ``flic/anchor_means`` (and ``flic/anchor_factors``, ``flic/anchor_counts``),
    writes ``flic/global_anchor_means`` (and ``flic/global_anchor_factors``) into the broadcast statistics, and logs
    the anchor drift (mean move of the anchor means since the previous aggregation) and the seconds of the step.
    Before each client's local training it tells the module the round (FLIC's round-dependent schedule switches).

    Args:
        weighting: :math:`\omega_i`: ``"uniform"`` (the paper) or ``"samples"`` (proportional to training samples).
        holders_only: average each class over the participants holding it.
        covariance_aggregation: ``"bures"`` or ``"cholesky_mean"`` (see above).
        picture_clients: the anchors' picture (:meth:`figures`) embeds the training samples of at most this many
            clients...
        picture_samples: ...and at most this many samples of each.

    """

    server_access = ServerAccess(writes=(GLOBAL_MEANS, GLOBAL_FACTORS))

    def __init__(
        self,
        weighting: Literal["uniform", "samples"] = "uniform",
        holders_only: bool = False,
        covariance_aggregation: Literal["bures", "cholesky_mean"] = "bures",
        picture_clients: int = 10,
        picture_samples: int = 100,
    ) -> None:
        if weighting not in ("uniform", "samples"):
            raise ValueError(f"AnchorUpdate: field 'weighting' must be 'uniform' or 'samples', got {weighting!r}")
        if covariance_aggregation not in ("bures", "cholesky_mean"):
            raise ValueError(
                "AnchorUpdate: field 'covariance_aggregation' must be 'bures' or 'cholesky_mean',"
                f" got {covariance_aggregation!r}"
            )
        self.weighting = weighting
        self.holders_only = holders_only
        self.covariance_aggregation = covariance_aggregation
        self.picture_clients = picture_clients
        self.picture_samples = picture_samples
        self.means: Tensor | None = None
        self.factors: Tensor | None = None
        self.drift = 0.0
        self.seconds = 0.0

    def on_client_fit_start(self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module) -> None:
        """Tell a FLIC module (a :class:`~fedhet.core.RoundAware` one) which round it trains."""
        if isinstance(module, RoundAware):
            module.set_round(round_idx, trainer.rounds)

    def aggregate(self, updates: list[Any]) -> tuple[Tensor, Tensor | None]:
        """The barycenter of the uploads' anchors: means ``(C, k)`` and factors ``(C, k, k)`` (or ``None``)."""
        means = torch.stack([u.statistics[ANCHOR_MEANS] for u in updates])  # (N, C, k)
        weights = torch.tensor(
            [float(u.num_samples) if self.weighting == "samples" else 1.0 for u in updates], dtype=torch.float64
        )
        weights = weights[:, None].expand(means.shape[:2])
        if self.holders_only:
            weights = weights * (torch.stack([u.statistics[ANCHOR_COUNTS] for u in updates]) > 0)
        if ANCHOR_FACTORS not in updates[0].statistics:
            return gaussian_barycenter(means, weights)[0], None
        factors = torch.stack([u.statistics[ANCHOR_FACTORS] for u in updates])  # (N, C, k, k)
        if self.covariance_aggregation == "cholesky_mean":
            mean, _ = gaussian_barycenter(means, weights)
            averaged, _ = gaussian_barycenter(factors.flatten(-2), weights)  # the weighted mean of the factors
            return mean, averaged.unflatten(-1, factors.shape[-2:])
        mean, covariance = gaussian_barycenter(means, weights, factors @ factors.mT)
        assert covariance is not None
        return mean, torch.linalg.cholesky(covariance.double()).to(factors.dtype)

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Average the round's anchors and put them in the broadcast statistics."""
        uploads = [u for u in updates if ANCHOR_MEANS in u.statistics]
        if not uploads:
            return
        start = time.perf_counter()
        means, factors = self.aggregate(uploads)
        self.seconds = time.perf_counter() - start
        self.drift = float((means - self.means).norm(dim=-1).mean()) if self.means is not None else 0.0
        self.means, self.factors = means, factors
        server_state.statistics[GLOBAL_MEANS] = means
        if factors is not None:
            server_state.statistics[GLOBAL_FACTORS] = factors
        trainer.log_dict({"flic/anchor_drift": self.drift, "flic/server_seconds": self.seconds}, step=round_idx)

    def figures(self, trainer: Federation, round_idx: int) -> dict[str, Figure]:
        """The global anchors with clients' embedded training samples in 2-D (``flic_anchors``), once averaged."""
        if self.means is None:
            return {}
        points, labels = embedded_samples(trainer, self.picture_clients, self.picture_samples)
        return {"flic_anchors": anchors_figure(self.means, points, labels, round_idx)}

    def state_dict(self) -> dict[str, Any]:
        """The latest global anchors."""
        return {"means": self.means, "factors": self.factors, "drift": self.drift}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.means = state_dict.get("means")
        self.factors = state_dict.get("factors")
        self.drift = float(state_dict.get("drift", 0.0))


def embedded_samples(trainer: Federation, max_clients: int, samples_per_client: int) -> tuple[Tensor, Tensor]:
    """Training samples of up to ``max_clients`` of this process's clients, embedded by their own module.

    Returns:
        the embeddings ``(N, k)`` (at most ``samples_per_client`` of each client, a seeded choice) and their labels
        ``(N,)``; none when the run's module has no ``embed_all``.

    """
    points, labels = [torch.zeros(0, 0)], [torch.zeros(0, dtype=torch.long)]
    owned = [cid for cid in trainer.client_ids if trainer.owns(cid)][:max_clients]
    for cid in owned:
        embed_all = getattr(trainer.client_module(cid), "embed_all", None)
        if embed_all is None:
            break
        z, y = embed_all(trainer.datamodule.client(cid).train_dataloader())
        keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[:samples_per_client]
        points.append(z[keep].cpu())
        labels.append(y[keep].cpu())
    width = max(p.shape[1] for p in points)
    return torch.cat([p.reshape(-1, width) for p in points]), torch.cat(labels)


def anchors_figure(global_means: Tensor, points: Tensor, labels: Tensor, round_idx: int) -> Figure:
    """FLIC's global class anchors (stars) and clients' embedded training samples (dots) in 2-D, coloured by class.

    Args:
        global_means: ``(C, d)`` anchor means in the shared space.
        points: ``(N, d)`` clients' samples embedded in the shared space by their own embedding.
        labels: ``(N,)`` the samples' classes.
        round_idx: the round shown.

    """
    num_classes = global_means.shape[0]
    flat = to_2d(torch.cat([global_means.detach().double().cpu(), points.detach().double().cpu()]))
    figure = new_figure()
    axes = figure.add_subplot()
    axes.scatter(flat[num_classes:, 0], flat[num_classes:, 1], c=[f"C{int(c) % 10}" for c in labels], s=6,
                 alpha=0.4, label="embedded samples")  # fmt: skip
    axes.scatter(flat[:num_classes, 0], flat[:num_classes, 1], c=[f"C{c % 10}" for c in range(num_classes)], s=260,
                 marker="*", edgecolors="black", label="global anchors")  # fmt: skip
    axes.set(xlabel="PC 1", ylabel="PC 2", title=f"FLIC anchors and embedded classes, round {round_idx + 1}")
    axes.legend(loc="best", fontsize=8)
    return figure
