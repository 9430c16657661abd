"""Client sampling: which clients take part in a round."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from fedhet.core.seeding import derive_seed


class ClientSampler(ABC):
    """Chooses the clients of each round from ``(seed, round)`` alone, so that runs resume and shard exactly.

    A sampler may also hold clients out of training (:meth:`held_out`), to be scored as new clients after it, each
    adapting for ``adapt_epochs`` epochs first (:class:`NewClients`); by default it holds none out.
    """

    #: local epochs of each adaptation phase of a held-out client
    adapt_epochs: int = 1

    @abstractmethod
    def sample(self, client_ids: Sequence[str], round_idx: int, num_rounds: int, seed: int) -> list[str]:
        """The clients taking part in round ``round_idx`` (0-based) of ``num_rounds``, in ``client_ids`` order."""

    def validate(self, num_clients: int) -> None:  # noqa: B027 - optional hook
        """Raise ``ValueError`` if the sampler cannot work with ``num_clients`` clients."""

    def held_out(self, client_ids: Sequence[str], seed: int) -> list[str]:
        """The clients never sampled for training, scored as new clients after it, in ``client_ids`` order: none."""
        return []


class FullParticipation(ClientSampler):
    """Every client takes part in every round."""

    def sample(self, client_ids: Sequence[str], round_idx: int, num_rounds: int, seed: int) -> list[str]:
        """All clients."""
        return list(client_ids)


class UniformSampler(ClientSampler):
    """A uniformly random fraction of the clients, drawn without replacement in each round.

    Args:
        fraction: the fraction of clients per round, in ``(0, 1]``; the count is ``ceil(fraction * N)``.
        min_clients: never fewer clients than this per round.
        full_last_round: every client takes part in the last round, as in FedPAC's protocol (Xu et al., ICLR 2023),
            so that every client's personal model is up to date when the run ends. A run resumed after a crash with
            the same ``rounds`` is identical to one that never stopped. A *finished* run extended by resuming with a
            larger ``rounds`` is not identical to a run started with that ``rounds``: its old last round took every
            client, where the longer run samples (the trainer warns when it resumes such a run).

    Example:
        >>> sampler = UniformSampler(fraction=0.3, min_clients=2)
        >>> ids = [f"c{i}" for i in range(10)]
        >>> len(sampler.sample(ids, round_idx=0, num_rounds=5, seed=0))
        3

    """

    def __init__(self, fraction: float = 0.1, min_clients: int = 1, full_last_round: bool = False) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"UniformSampler: field 'fraction' must be in (0, 1], got {fraction}")
        if min_clients < 1:
            raise ValueError(f"UniformSampler: field 'min_clients' must be at least 1, got {min_clients}")
        self.fraction = fraction
        self.min_clients = min_clients
        self.full_last_round = full_last_round

    def validate(self, num_clients: int) -> None:
        """Refuse more clients per round than there are clients."""
        if self.min_clients > num_clients:
            raise ValueError(
                f"UniformSampler: field 'min_clients' is {self.min_clients} but the federation has only"
                f" {num_clients} clients"
            )

    def sample(self, client_ids: Sequence[str], round_idx: int, num_rounds: int, seed: int) -> list[str]:
        """``max(min_clients, ceil(fraction * N))`` clients drawn from a generator seeded by ``(seed, round)``."""
        if self.full_last_round and round_idx == num_rounds - 1:
            return list(client_ids)
        count = min(len(client_ids), max(self.min_clients, math.ceil(self.fraction * len(client_ids))))
        rng = np.random.default_rng(derive_seed(seed, "sample", round_idx))
        chosen = np.sort(rng.choice(len(client_ids), size=count, replace=False))
        return [client_ids[i] for i in chosen]


class NewClients(ClientSampler):
    """Holds a seeded fraction of the clients out of training, to be scored as clients that join after it.

    The held-out clients are never sampled; the others are sampled by ``sampler`` (every one by default) as if the
    federation had only them. After training, each held-out client starts from the final federation and adapts what
    its method says a new client adapts (``new_client_phases()`` of
    :class:`~fedhet.modules.FederatedModule`) for ``adapt_epochs`` epochs, then is scored on its test split as
    ``test_new/<metric>_mean|_weighted|_worst`` (:mod:`fedhet.plugins.rounds.new_clients`), as PFLlib's
    ``num_new_clients``.

    Args:
        fraction: the fraction of clients held out, in ``(0, 1)``; the count is ``round(fraction * N)``, at least one
            and at most ``N - 1``.
        adapt_epochs: local epochs of each adaptation phase of a held-out client (the same budget for every method).
        sampler: how the training clients are sampled in each round; every one of them by default.

    Example:
        >>> sampler = NewClients(fraction=0.2)
        >>> ids = [f"c{i}" for i in range(10)]
        >>> held = sampler.held_out(ids, seed=0)
        >>> len(held), set(held) & set(sampler.sample(ids, round_idx=0, num_rounds=5, seed=0))
        (2, set())

    """

    def __init__(self, fraction: float, adapt_epochs: int = 1, sampler: ClientSampler | None = None) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"NewClients: field 'fraction' must be in (0, 1), got {fraction}")
        if adapt_epochs < 1:
            raise ValueError(f"NewClients: field 'adapt_epochs' must be at least 1, got {adapt_epochs}")
        if isinstance(sampler, NewClients):
            raise ValueError("NewClients: field 'sampler' must sample the training clients, not hold clients out again")
        self.fraction = fraction
        self.adapt_epochs = adapt_epochs
        self.sampler = sampler or FullParticipation()

    @property
    def full_last_round(self) -> bool:
        """Whether the training clients' sampler takes every one of them in the last round."""
        return bool(getattr(self.sampler, "full_last_round", False))

    def validate(self, num_clients: int) -> None:
        """Refuse a federation of fewer than two clients, then check the inner sampler on the training clients."""
        if num_clients < 2:
            raise ValueError(
                f"NewClients: holding clients out needs at least 2 clients (one held out, one trained), got"
                f" {num_clients}"
            )
        self.sampler.validate(num_clients - self.held_out_count(num_clients))

    def held_out_count(self, num_clients: int) -> int:
        """``round(fraction * N)`` clamped to ``[1, N - 1]``."""
        return min(num_clients - 1, max(1, round(self.fraction * num_clients)))

    def held_out(self, client_ids: Sequence[str], seed: int) -> list[str]:
        """The held-out clients, in ``client_ids`` order: a draw seeded by ``seed`` over the sorted client ids.

        The draw depends on the seed and the set of client ids alone, not on their order or on any round.
        """
        ordered = sorted(client_ids)
        rng = np.random.default_rng(derive_seed(seed, "new_clients"))
        chosen = {ordered[i] for i in rng.choice(len(ordered), size=self.held_out_count(len(ordered)), replace=False)}
        return [cid for cid in client_ids if cid in chosen]

    def training_clients(self, client_ids: Sequence[str], seed: int) -> list[str]:
        """The clients that train, in ``client_ids`` order."""
        held = set(self.held_out(client_ids, seed))
        return [cid for cid in client_ids if cid not in held]

    def sample(self, client_ids: Sequence[str], round_idx: int, num_rounds: int, seed: int) -> list[str]:
        """The inner sampler's choice among the training clients."""
        return self.sampler.sample(self.training_clients(client_ids, seed), round_idx, num_rounds, seed)
