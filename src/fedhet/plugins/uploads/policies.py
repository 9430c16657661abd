"""Upload policies: what the trainer does with the clients' uploads, as components it composes.

A round's uploads pass three kinds of policy:

* :class:`UploadCheck` — per client, right after its training: is its upload admitted? :class:`DeclaredUpload` rejects
  an upload that is not what the server expects of the client (:class:`~fedhet.core.ExpectedUpload`: the shared
  parameters' names, shapes and dtypes, the method's declared statistics, a sample count within the client's),
  :class:`FiniteUpload` rejects NaN/Inf losses and tensors, :class:`TimeBudget` rejects stragglers
  (``faults.client_time_budget_s``). A trainer's ``upload_checks`` adds the user's own.
* :class:`FailureBudget` — per round, once the uploads are gathered: may the run go on with the clients that failed?
* :class:`ServerUpdate` — per round: turn the admitted uploads into new shared parameters. :class:`PlainUpdate` folds
  them with an :class:`~fedhet.plugins.Aggregator`; :class:`PrivateUpdate` clips and noises them
  (:class:`~fedhet.plugins.UploadPrivacy`) and accounts for the privacy spent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from fedhet.core import ClientFailure, ClientUpdate, ExpectedUpload, non_finite
from fedhet.core.seeding import derive_seed
from fedhet.plugins.uploads.aggregators import Aggregator
from fedhet.plugins.uploads.privacy import UploadPrivacy

log = logging.getLogger(__name__)


class UploadCheck(Protocol):
    """Decides whether one trained client's upload joins the round's aggregate."""

    def reject(self, update: ClientUpdate, seconds: float) -> ClientFailure | None:
        """Why ``update`` (trained in ``seconds`` of wall time) is left out, or ``None`` to admit it."""


class DeclaredUpload:
    """Rejects an upload that is not exactly what the server expects of its client (an ``"invalid"`` failure).

    The first check of every trainer: whatever reaches a server step has the shared parameters of the client's
    architecture (names, shapes, dtypes), exactly the statistics its method declares
    (:meth:`~fedhet.modules.FederatedModule.upload_declaration`), a loss, and a sample count in ``[1, num_train]``.

    Args:
        expected: what the server admits from a client, by client id; raises ``KeyError`` for a client the
            federation does not hold.
        check_metric_names: also refuse training metrics the method does not declare (a deployed server).

    """

    def __init__(self, expected: Callable[[str], ExpectedUpload], check_metric_names: bool = False) -> None:
        self.expected = expected
        self.check_metric_names = check_metric_names

    def reject(self, update: ClientUpdate, seconds: float, shared_checked: bool = False) -> ClientFailure | None:
        """An ``"invalid"`` failure naming the field at fault, or ``None``.

        ``shared_checked``: the engine has checked the shared parameters already, for the whole stack of clients that
        produced them (:meth:`~fedhet.core.ExpectedUpload.stack_mismatch`); the rest of the upload is checked here.
        """
        try:
            expected = self.expected(update.client_id)
        except KeyError:
            return ClientFailure(update.client_id, "invalid", "upload refused: the federation holds no such client")
        reason = expected.mismatch(
            update.shared,
            update.statistics,
            update.metrics,
            update.num_samples,
            self.check_metric_names,
            shared_checked,
        )
        return None if reason is None else ClientFailure(update.client_id, "invalid", f"upload refused: {reason}")


class FiniteUpload:
    """Rejects an upload whose loss, shared parameters or statistics hold a NaN or an infinity."""

    def reject(self, update: ClientUpdate, seconds: float, shared_checked: bool = False) -> ClientFailure | None:
        """A ``"non_finite"`` failure naming the tensors at fault, or ``None``.

        ``shared_checked``: the engine has found the shared parameters finite already, for the whole stack of clients
        that produced them (one reduction per stacked tensor); the statistics and the loss are checked here.
        """
        bad = non_finite(update.statistics) if shared_checked else non_finite(update.shared, update.statistics)
        if bad or not math.isfinite(update.metrics["loss"]):
            return ClientFailure(update.client_id, "non_finite", f"non-finite upload in {bad or ['loss']}")
        return None


class TimeBudget:
    """Rejects a straggler: a client whose loading, training and upload took more than ``seconds`` of wall time.

    Args:
        budget_s: the most seconds a client's local work may take (``faults.client_time_budget_s``).

    """

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s

    def reject(self, update: ClientUpdate, seconds: float) -> ClientFailure | None:
        """A ``"straggler"`` failure when ``seconds`` exceeds the budget, or ``None``."""
        if seconds <= self.budget_s:
            return None
        return ClientFailure(
            update.client_id,
            "straggler",
            f"straggler: local training took {seconds:.3f} s, over client_time_budget_s={self.budget_s}",
        )


DIVERGED_EXIT_STATUS = 3
"""``fedhet fit``'s exit status when a round stopped the run with every failed client's upload non-finite."""


class ClientFailuresError(RuntimeError):
    """A round stopped the run: more of its clients failed than ``faults.max_client_failures`` allows.

    Args:
        message: the sentence naming the round, every failed client and its reason.
        kinds: each failed client's :class:`~fedhet.core.ClientFailure` kind.

    """

    def __init__(self, message: str, kinds: Sequence[str]) -> None:
        super().__init__(message)
        self.kinds = tuple(kinds)

    @property
    def diverged(self) -> bool:
        """Whether every failure was a non-finite loss or upload: training diverged (a step size too large...)."""
        return bool(self.kinds) and all(kind == "non_finite" for kind in self.kinds)


class FailureBudget:
    """Names each failed client in the log and stops the run when too many of a round's clients failed.

    Args:
        max_fraction: the trainer's ``faults.max_client_failures``, the fraction of the sampled clients that may fail.

    """

    def __init__(self, max_fraction: float) -> None:
        self.max_fraction = max_fraction

    def check(
        self, round_idx: int, sampled: Sequence[str], updates: Sequence[ClientUpdate], failures: Sequence[ClientFailure]
    ) -> None:
        """Log every failure; raise when none was admitted or more than ``max_fraction`` failed.

        Raises:
            ClientFailuresError: naming every failed client and its reason.

        """
        for failure in failures:
            log.warning(
                "round %d: client '%s' left out of the aggregate: %s", round_idx, failure.client_id, failure.reason
            )
        if failures and (not updates or len(failures) > self.max_fraction * len(sampled)):
            details = "; ".join(f"'{f.client_id}': {f.reason}" for f in failures)
            raise ClientFailuresError(
                f"round {round_idx}: {len(failures)} of {len(sampled)} clients failed, more than"
                f" max_client_failures={self.max_fraction} allows: {details}",
                [f.kind for f in failures],
            )


class ServerUpdate(Protocol):
    """Turns a round's admitted uploads into new shared parameters, with what it logs and checkpoints.

    ``private`` says whether it gives differential privacy: a run resumes only from a checkpoint written with the
    same (:func:`~fedhet.plugins.storage.checkpoint.check_checkpoint_matches`).
    """

    private: bool

    def prepare(self, updates: list[ClientUpdate], shared: Mapping[str, Tensor], round_idx: int) -> list[ClientUpdate]:
        """The uploads as the server receives them (e.g. clipped and noised) from the raw ones."""

    def aggregate(
        self, updates: Sequence[ClientUpdate], shared: Mapping[str, Tensor], num_sampled: int, round_idx: int
    ) -> dict[str, Tensor]:
        """The new value of every shared parameter some client uploaded."""

    def metrics(self, sample_rate: float) -> dict[str, float]:
        """What the round logs besides the engine's own metrics."""

    def state_dict(self) -> dict[str, Any] | None:
        """The policy's state for the checkpoint (``None``: stateless)."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""


class PlainUpdate:
    """Uploads are received as sent and folded by ``aggregator`` (the module's ``configure_aggregator()`` by default).

    Args:
        aggregator: folds the uploads by parameter name.

    """

    private = False

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator

    def prepare(self, updates: list[ClientUpdate], shared: Mapping[str, Tensor], round_idx: int) -> list[ClientUpdate]:
        """The uploads, unchanged."""
        return updates

    def aggregate(
        self, updates: Sequence[ClientUpdate], shared: Mapping[str, Tensor], num_sampled: int, round_idx: int
    ) -> dict[str, Tensor]:
        """The aggregator's result over ``updates``, in their order."""
        self.aggregator.reset()
        for update in updates:
            self.aggregator.update(update)
        return self.aggregator.compute()

    def metrics(self, sample_rate: float) -> dict[str, float]:
        """Nothing."""
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        """``None``: no state."""
        return None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""


class PrivateUpdate:
    """Client-level differential privacy: clipped updates, noise seeded by (seed, round[, client]), an accountant.

    Args:
        privacy: the clipping, noise and accounting (:class:`~fedhet.plugins.UploadPrivacy`).
        seed: the seed of the noise; ``None``: the run's (``FederatedTrainer`` fills it in).

    """

    private = True

    def __init__(self, privacy: UploadPrivacy, seed: int | None = None) -> None:
        self.privacy = privacy
        self.seed = seed

    @property
    def _seed(self) -> int:
        if self.seed is None:
            raise RuntimeError("PrivateUpdate: no seed; the trainer gives it the run's")
        return self.seed

    def prepare(self, updates: list[ClientUpdate], shared: Mapping[str, Tensor], round_idx: int) -> list[ClientUpdate]:
        """What private clients send: clipped updates and noised statistics, each client's noise its own."""
        private = []
        for update in updates:
            generator = torch.Generator().manual_seed(derive_seed(self._seed, "privacy", round_idx, update.client_id))
            private.append(self.privacy.privatize(update, shared, generator))
        return private

    def aggregate(
        self, updates: Sequence[ClientUpdate], shared: Mapping[str, Tensor], num_sampled: int, round_idx: int
    ) -> dict[str, Tensor]:
        """The private aggregate: uniform mean over the sampled clients plus the round's Gaussian noise."""
        generator = torch.Generator().manual_seed(derive_seed(self._seed, "privacy", round_idx))
        return self.privacy.aggregate(updates, shared, num_sampled, generator)

    def metrics(self, sample_rate: float) -> dict[str, float]:
        """``privacy/epsilon`` after composing this round."""
        return self.privacy.account(sample_rate=sample_rate)

    def state_dict(self) -> dict[str, Any] | None:
        """The accountant's history."""
        return self.privacy.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the accountant."""
        self.privacy.load_state_dict(state)


def server_update_for(given: ServerUpdate | Aggregator | UploadPrivacy | None, seed: int) -> ServerUpdate | None:
    """The server update ``given`` stands for; a :class:`PrivateUpdate` without a seed takes the run's ``seed``.

    An :class:`~fedhet.plugins.Aggregator` is folded plainly (:class:`PlainUpdate`), an
    :class:`~fedhet.plugins.UploadPrivacy` privately (:class:`PrivateUpdate` seeded by ``seed``); a server update is
    itself, and ``None`` stays ``None`` (the module's ``configure_aggregator()``, known once the module is).
    """
    if isinstance(given, Aggregator):
        return PlainUpdate(given)
    if isinstance(given, UploadPrivacy):
        return PrivateUpdate(given, seed)
    if isinstance(given, PrivateUpdate) and given.seed is None:
        return PrivateUpdate(given.privacy, seed)
    return given
