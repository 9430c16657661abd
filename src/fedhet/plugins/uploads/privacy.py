"""Central differential privacy of what leaves the clients: clipped updates, Gaussian noise, an RDP accountant."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

import torch
from torch import Tensor

from fedhet.core import ClientUpdate
from fedhet.functional.privacy import add_gaussian_noise, clip_by_global_norm, gaussian_noise_std

log = logging.getLogger(__name__)


class UploadPrivacy:
    r"""Client-level differential privacy of the uploads, for ``FederatedTrainer(server_update=UploadPrivacy(...))``.

    **Shared parameters** (central noise, DP-FedAvg; McMahan et al., ICLR 2018): each client's update
    :math:`\Delta_k = \theta_k - \theta` (its trained shared parameters minus those it received) is clipped to global
    L2 norm ``clip_norm`` :math:`C` over all its shared tensors; the server sets

    .. math:: \theta \leftarrow \theta + \frac{1}{m}\Big(\sum_k \bar\Delta_k + \mathcal{N}(0, z^2 C^2 I)\Big)

    with :math:`m` the number of clients *sampled* in the round (a failed client contributes nothing; the divisor
    stays :math:`m`) and :math:`z` = ``noise_multiplier``. Clients are weighted uniformly (the privacy unit is the
    client), so no aggregator is used: privacy is the whole server update.

    **Statistics** (per-client noise): the statistics whose names match ``statistics`` (centroids, anchors, atoms...)
    are clipped jointly to ``statistics_clip_norm`` and each client adds its own
    :math:`\mathcal{N}(0, z_s^2 C_s^2 I)` before upload, so whatever the server does with them is covered. Integer
    statistics cannot carry Gaussian noise and are refused. A statistic matched by neither ``statistics`` nor
    ``public_statistics`` is refused at the first upload, before anything is aggregated, logged or saved: the user
    must either cover it or declare it public. Public statistics are uploaded as they are and are **not covered** by
    :math:`\varepsilon` (a warning names them). Every upload also carries the client's training-set size
    (``ClientUpdate.num_samples``) and its training loss, which are not noised either.

    **Accounting**: each round composes a sampled Gaussian mechanism of rate :math:`q` = sampled / clients and noise
    multiplier :math:`z` (and one with :math:`z_s` for statistics) in Opacus's Rényi-DP accountant
    (``opacus.accountants.RDPAccountant``); ``privacy/epsilon`` is the :math:`\varepsilon` spent so far for
    ``delta``. The accountant assumes Poisson sampling; fixed-size client sampling (``UniformSampler``) is treated
    with :math:`q = m/N`, the usual approximation of DP-FedAvg; with every client in every round :math:`q = 1` and no
    amplification is claimed. Noise is drawn from generators seeded by (seed, round[, client]), so runs stay
    reproducible and resumable.

    Args:
        clip_norm: :math:`C`, the clipping norm of a client's shared-parameter update.
        noise_multiplier: :math:`z > 0`.
        delta: the :math:`\delta` at which :math:`\varepsilon` is reported.
        statistics: ``fnmatch`` patterns of the statistic names to clip and noise.
        statistics_clip_norm: :math:`C_s`; required when ``statistics`` is not empty.
        statistics_noise_multiplier: :math:`z_s > 0`; required when ``statistics`` is not empty.
        public_statistics: ``fnmatch`` patterns of the statistic names the user declares public: uploaded without
            clipping or noise and outside :math:`\varepsilon` (e.g. class counts the task publishes anyway).

    Example:
        >>> privacy = UploadPrivacy(clip_norm=1.0, noise_multiplier=1.1, delta=1e-5)
        >>> privacy.account(sample_rate=1.0)["privacy/epsilon"] > 0
        True

    """

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        delta: float = 1e-5,
        statistics: Sequence[str] = (),
        statistics_clip_norm: float | None = None,
        statistics_noise_multiplier: float | None = None,
        public_statistics: Sequence[str] = (),
    ) -> None:
        try:
            from opacus.accountants import RDPAccountant
        except ModuleNotFoundError as err:  # pragma: no cover - depends on the environment
            raise ModuleNotFoundError("UploadPrivacy needs Opacus's accountant: pip install 'fedhet[privacy]'") from err
        checks = (
            ("clip_norm", clip_norm, clip_norm > 0, "positive"),
            ("noise_multiplier", noise_multiplier, noise_multiplier > 0, "positive"),
            ("delta", delta, 0 < delta < 1, "in (0, 1)"),
        )
        for field, value, valid, expected in checks:
            if not valid:
                raise ValueError(f"UploadPrivacy: field '{field}' must be {expected}, got {value}")
        self.statistics = tuple(statistics)
        self.public_statistics = tuple(public_statistics)
        statistics_args = {
            "statistics_clip_norm": statistics_clip_norm,
            "statistics_noise_multiplier": statistics_noise_multiplier,
        }
        for field, setting in statistics_args.items():
            if (setting is not None and setting <= 0) or (self.statistics and setting is None):
                raise ValueError(
                    f"UploadPrivacy: field '{field}' must be positive (and set when 'statistics' is), got {setting}"
                )
        self.clip_norm = clip_norm
        self.noise_multiplier = noise_multiplier
        self.delta = delta
        self.statistics_clip_norm = statistics_clip_norm
        self.statistics_noise_multiplier = statistics_noise_multiplier
        self.accountant = RDPAccountant()
        self._public_warned: set[str] = set()

    # ---------------------------------------------------------------- per client, before upload
    def privatize(
        self, update: ClientUpdate, received: Mapping[str, Tensor], generator: torch.Generator
    ) -> ClientUpdate:
        """What a private client uploads: its clipped shared parameters and its clipped, noised statistics.

        Args:
            update: the client's raw upload.
            received: the shared parameters the client received this round (the reference of its update).
            generator: the client's noise generator for this round.

        Returns:
            a new upload whose ``shared`` is ``received + clip(update.shared - received)``.

        Raises:
            ValueError: naming the client and the tensor, when a shared parameter was not received from the server,
                a statistic to noise is not floating point, or a statistic is neither covered nor declared public.

        """
        missing = [name for name in update.shared if name not in received]
        if missing:
            raise ValueError(
                f"client '{update.client_id}': shared parameters {missing} have no server value to clip an update"
                " against; privacy needs every shared parameter on the server"
            )
        delta = {name: value - received[name] for name, value in update.shared.items()}
        clipped, _ = self._clip(update.client_id, "shared parameter", delta, self.clip_norm)
        shared = {name: received[name] + value for name, value in clipped.items()}
        return replace(update, shared=shared, statistics=self._privatize_statistics(update, generator))

    def _privatize_statistics(self, update: ClientUpdate, generator: torch.Generator) -> dict[str, Tensor]:
        covered = {n: t for n, t in update.statistics.items() if any(fnmatchcase(n, p) for p in self.statistics)}
        uncovered = sorted(set(update.statistics) - set(covered))
        public = [n for n in uncovered if any(fnmatchcase(n, p) for p in self.public_statistics)]
        refused = [n for n in uncovered if n not in public]
        if refused:
            raise ValueError(
                f"client '{update.client_id}': statistics {refused} would leave the client without clipping or noise,"
                " outside epsilon; cover them with UploadPrivacy field 'statistics' (with 'statistics_clip_norm' and"
                " 'statistics_noise_multiplier') or declare them public with field 'public_statistics'"
            )
        unannounced = [n for n in public if n not in self._public_warned]
        if unannounced:
            log.warning("privacy: statistics %s leave the clients without clipping or noise: epsilon does not cover"
                        " them (declared public)", unannounced)  # fmt: skip
            self._public_warned.update(unannounced)
        if not covered:
            return dict(update.statistics)
        clip, multiplier = float(self.statistics_clip_norm or 0), float(self.statistics_noise_multiplier or 0)
        clipped, _ = self._clip(update.client_id, "statistic", covered, clip)
        noisy = add_gaussian_noise(clipped, gaussian_noise_std(multiplier, clip), generator)
        return {**update.statistics, **noisy}

    @staticmethod
    def _clip(client_id: str, kind: str, tensors: dict[str, Tensor], norm: float) -> tuple[dict[str, Tensor], float]:
        for name, value in tensors.items():
            if not value.is_floating_point():
                raise ValueError(
                    f"client '{client_id}': {kind} '{name}' has dtype {value.dtype}; differential privacy needs"
                    " floating tensors (make it personal, or leave it out of the privatised statistics)"
                )
        return clip_by_global_norm(tensors, norm)

    # ---------------------------------------------------------------- on the server
    def aggregate(
        self,
        uploads: Sequence[ClientUpdate],
        received: Mapping[str, Tensor],
        num_sampled: int,
        generator: torch.Generator,
    ) -> dict[str, Tensor]:
        """The new shared parameters: received + (sum of clipped updates + Gaussian noise) / clients sampled.

        Args:
            uploads: the privatised uploads of the round (see :meth:`privatize`).
            received: the shared parameters sent down this round.
            num_sampled: :math:`m`, the clients sampled this round (failed ones included).
            generator: the round's noise generator (the same on every process).

        Returns:
            the new value of every shared parameter some client uploaded.

        """
        names = [name for name in received if any(name in u.shared for u in uploads)]
        sums = {name: torch.zeros_like(received[name], dtype=torch.float64) for name in names}
        for upload in uploads:
            for name, value in upload.shared.items():
                sums[name] += (value - received[name]).double()
        noisy = add_gaussian_noise(sums, gaussian_noise_std(self.noise_multiplier, self.clip_norm), generator)
        return {name: (received[name].double() + noisy[name] / num_sampled).to(received[name].dtype) for name in names}

    def account(self, sample_rate: float) -> dict[str, float]:
        """Compose one round at client sampling rate ``sample_rate``; the metrics to log for the round."""
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=sample_rate)
        if self.statistics:
            self.accountant.step(noise_multiplier=float(self.statistics_noise_multiplier or 0), sample_rate=sample_rate)
        return {"privacy/epsilon": self.epsilon()}

    def epsilon(self) -> float:
        r"""The :math:`\\varepsilon` spent so far at :attr:`delta` (0 before any round)."""
        return float(self.accountant.get_epsilon(delta=self.delta)) if self.accountant.history else 0.0

    def state_dict(self) -> dict[str, Any]:
        """The accountant's history, ``[(noise_multiplier, sample_rate, steps), ...]``, for the checkpoint."""
        return {"history": [list(step) for step in self.accountant.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the accountant from :meth:`state_dict`."""
        self.accountant.history = [tuple(step) for step in state["history"]]
