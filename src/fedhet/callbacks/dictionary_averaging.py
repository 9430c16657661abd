"""DictionaryAveraging: FedDaDiL's server step — one global dictionary from the clients' atom versions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, ServerState
from fedhet.core.seeding import derive_seed
from fedhet.core.statistics import ATOM_NAMES, GLOBAL_NAMES
from fedhet.functional.aggregation import weighted_mean

Rule = Literal["avg", "weighted", "random"]


class DictionaryAveraging(FederatedCallback):
    r"""Combines the atom versions the round's clients upload into the next global dictionary (FedDaDiL eq. 12).

    ``"avg"`` (the paper) averages every support point over the clients, index by index:
    :math:`P_g^{(r+1)} = \frac{1}{N} \sum_\ell P_\ell^*` (features and labels alike; with the softmax
    parametrisation the labels' logits are averaged). The alternatives of the authors' reference code are options:
    ``"weighted"`` weighs each client by its number of training samples, ``"random"`` takes one participant's version,
    drawn from the run's seed and the round (the ICASSP 2024 predecessor). Reads the uploads' ``dadil/atom_features``
    and ``dadil/atom_labels``, writes ``dadil/global_atom_features`` and ``dadil/global_atom_labels`` into the
    broadcast statistics, and logs ``dadil/version_spread`` (mean squared distance of the clients' atom features to
    the new dictionary: how far local versions drifted apart) and ``dadil/server_seconds``.

    Args:
        rule: ``"avg"``, ``"weighted"`` or ``"random"``.

    """

    def __init__(self, rule: Rule = "avg") -> None:
        if rule not in ("avg", "weighted", "random"):
            raise ValueError(f"DictionaryAveraging: field 'rule' must be 'avg', 'weighted' or 'random', got {rule!r}")
        self.rule = rule
        self.dictionary: dict[str, Tensor] = {}
        self.spread = 0.0
        self.server_seconds = 0.0

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Combine the round's atom versions and put the global dictionary in the broadcast statistics."""
        uploads = [u for u in updates if all(name in u.statistics for name in ATOM_NAMES)]
        if not uploads:
            return
        start = time.perf_counter()
        versions = [{name: u.statistics[name] for name in ATOM_NAMES} for u in uploads]
        if self.rule == "random":
            generator = torch.Generator().manual_seed(derive_seed(getattr(trainer, "seed", 0), "dadil", round_idx))
            self.dictionary = dict(versions[int(torch.randint(len(versions), (1,), generator=generator))])
        else:
            weights = [float(u.num_samples) for u in uploads] if self.rule == "weighted" else None
            self.dictionary = weighted_mean(versions, weights)
        features = torch.stack([v[ATOM_NAMES[0]] for v in versions])
        self.spread = float((features - self.dictionary[ATOM_NAMES[0]]).pow(2).sum(-1).mean())
        for name, global_name in zip(ATOM_NAMES, GLOBAL_NAMES, strict=True):
            server_state.statistics[global_name] = self.dictionary[name]
        self.server_seconds = time.perf_counter() - start
        fabric = getattr(trainer, "fabric", None)
        if fabric is not None:
            fabric.log_dict(
                {"dadil/version_spread": self.spread, "dadil/server_seconds": self.server_seconds}, step=round_idx
            )

    def state_dict(self) -> dict[str, Any]:
        """The latest global dictionary and its version spread."""
        return {"dictionary": dict(self.dictionary), "spread": self.spread}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.dictionary = dict(state_dict.get("dictionary", {}))
        self.spread = float(state_dict.get("spread", 0.0))
