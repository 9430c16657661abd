r"""FedDaDiL's server step: its wire names, its upload declaration and the dictionary averaging.

E. F. Montesuma, F. Espinoza Castellon, F. N. Mboula, A. Mayoue, A. Souloumiac, C. Gouy-Pailler, "Dataset Dictionary
Learning in a Wasserstein Space for Federated Domain Adaptation", 2024. A client (:class:`~fedhet.modules.FedDaDiL`)
uploads its version of the :math:`K` atoms (support features and label logits), as :func:`feddadil_upload` declares;
the server's one callback, :class:`DictionaryAveraging`, broadcasts the next global dictionary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.figures import new_figure, to_2d
from fedhet.core import ClientUpdate, Federation, ServerAccess, ServerState, TensorSpec, UploadDeclaration
from fedhet.core.seeding import derive_seed
from fedhet.functional.aggregation import weighted_mean

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Rule = Literal["avg", "weighted", "random"]

ATOM_NAMES = ("dadil/atom_features", "dadil/atom_labels")
"""What a client uploads: its version of the atoms, features ``(K, n, d)`` and labels ``(K, n, c)``."""
GLOBAL_NAMES = ("dadil/global_atom_features", "dadil/global_atom_labels")
"""What the server broadcasts: the global dictionary, shaped as the atoms."""


def feddadil_upload(features: TensorSpec, labels: TensorSpec) -> UploadDeclaration:
    """What a FedDaDiL client uploads: its atom version, shaped as the dictionary (``features``, ``labels``).

    Example:
        >>> sorted(feddadil_upload(TensorSpec((2, 5, 3)), TensorSpec((2, 5, 4))).statistics)
        ['dadil/atom_features', 'dadil/atom_labels']

    """
    return UploadDeclaration(dict(zip(ATOM_NAMES, (features, labels), strict=True)))


class DictionaryAveraging(FederatedCallback):
    r"""Combines the atom versions the round's clients upload into the next global dictionary (FedDaDiL eq. 12).

    ``"avg"`` (the paper) averages every support point over the clients, index by index:
    :math:`P_g^{(r+1)} = \frac{1}{N} \sum_\ell P_\ell^*` (features and labels alike; with the softmax
    parametrisation the labels' logits are averaged). The alternatives of the authors' reference code are options:
    ``"weighted"`` weighs each client by its number of training samples, ``"random"`` takes one participant's version,
    drawn from the run's seed and the round (the ICASSP 2024 predecessor). Reads the uploads' :data:`ATOM_NAMES`,
    writes :data:`GLOBAL_NAMES` into the broadcast statistics, and logs ``dadil/version_spread`` (mean squared
    distance of the clients' atom features to the new dictionary: how far local versions drifted apart) and
    ``dadil/server_seconds``.

    Args:
        rule: ``"avg"``, ``"weighted"`` or ``"random"``.

    """

    server_access = ServerAccess(writes=GLOBAL_NAMES)

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
        trainer.log_dict(
            {"dadil/version_spread": self.spread, "dadil/server_seconds": self.server_seconds}, step=round_idx
        )

    def figures(self, trainer: Federation, round_idx: int) -> dict[str, Figure]:
        """The global dictionary's atoms in 2-D (``feddadil_atoms``), once a round has combined them."""
        if not self.dictionary:
            return {}
        features, labels = (self.dictionary[name] for name in ATOM_NAMES)
        return {"feddadil_atoms": atoms_figure(features, labels, round_idx)}

    def state_dict(self) -> dict[str, Any]:
        """The latest global dictionary and its version spread."""
        return {"dictionary": dict(self.dictionary), "spread": self.spread}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.dictionary = dict(state_dict.get("dictionary", {}))
        self.spread = float(state_dict.get("spread", 0.0))


def atoms_figure(features: Tensor, labels: Tensor, round_idx: int) -> Figure:
    """FedDaDiL's dictionary: each atom's support points in 2-D (one panel per atom), coloured by their label.

    Args:
        features: ``(K, n, d)`` atom supports.
        labels: ``(K, n, c)`` soft labels (each point takes its most likely class).
        round_idx: the round shown.

    """
    k, n, _ = features.shape
    flat = to_2d(features.reshape(k * n, -1)).reshape(k, n, 2)
    figure = new_figure(3.0 * k, 3.2)
    panels = figure.subplots(1, k, sharex=True, sharey=True, squeeze=False)[0]
    for atom, axes in enumerate(panels):
        classes = labels[atom].argmax(-1).tolist()
        axes.scatter(flat[atom, :, 0], flat[atom, :, 1], c=[f"C{c % 10}" for c in classes], s=8)
        axes.set(title=f"atom {atom + 1}", xlabel="PC 1")
    panels[0].set_ylabel("PC 2")
    figure.suptitle(f"FedDaDiL atoms, round {round_idx + 1}")
    return figure
