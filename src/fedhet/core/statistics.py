"""The names under which methods upload statistics and the server broadcasts them: the upload contracts.

A method's module writes these keys into :meth:`~fedhet.core.FederatedModuleProtocol.client_statistics` and its
server callback reads them from :attr:`~fedhet.core.ClientUpdate.statistics` and writes the ``GLOBAL_*`` keys into
:attr:`~fedhet.core.ServerState.statistics` (or per-client payloads). Both sides import them from here, so neither
package imports the other for a string.
"""

from __future__ import annotations

# FLIC (Gaussian anchors: modules.flic, callbacks.anchor_update)
ANCHOR_MEANS = "flic/anchor_means"
ANCHOR_FACTORS = "flic/anchor_factors"
ANCHOR_COUNTS = "flic/anchor_counts"
GLOBAL_MEANS = "flic/global_anchor_means"
GLOBAL_FACTORS = "flic/global_anchor_factors"

# FedHeNN (representation kernels: modules.fedhenn, callbacks.kernel_sync)
KERNEL = "fedhenn/kernel"
GLOBAL_KERNEL = "fedhenn/global_kernel"

# FedPAC (centroids and head statistics: modules.fedpac, callbacks.centroid_sync, callbacks.head_mixing)
CENTROIDS = "fedpac/centroids"
COUNTS = "fedpac/counts"
HEAD_H = "fedpac/H"
HEAD_V = "fedpac/v"
HEAD_PREFIX = "fedpac/"
GLOBAL_CENTROIDS = "fedpac/global_centroids"
GLOBAL_COUNTS = "fedpac/global_counts"
HEAD_NAMES = ("head.weight", "head.bias")
"""The personal head's parameters, which the server mixes per client."""

# FedDaDiL (atoms: modules.feddadil, callbacks.dictionary_averaging)
ATOM_NAMES = ("dadil/atom_features", "dadil/atom_labels")
"""What a client uploads: its version of the atoms (features, label logits)."""
GLOBAL_NAMES = ("dadil/global_atom_features", "dadil/global_atom_labels")
"""What the server broadcasts: the global dictionary."""

# HyFEM (whole client models: modules.hyfem, callbacks.model_matching)
STAT_PREFIX = "hyfem/"
"""Prefix of the uploaded statistics: ``hyfem/<parameter name>`` for every parameter of the client model."""
EXTRACTORS = "body.extractors."
"""Prefix of the extractor parameters (:math:`\\Theta`); the others form the classifier (:math:`w`)."""
CLASSIFIER = ("body.hidden.weight", "body.hidden.bias", "head.weight", "head.bias")
"""The classifier's parameters in :class:`~fedhet.functional.matching.Classifier` order ``(w1, b1, w2, b2)``."""


def anchor_key(name: str) -> str:
    """The state-dict name of HyFEM's anchor (server view) of parameter ``name``, e.g. ``anchors.head/weight``.

    Example:
        >>> anchor_key("head.weight")
        'anchors.head/weight'

    """
    return "anchors." + name.replace(".", "/")
