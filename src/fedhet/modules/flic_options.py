"""FLIC's constructor checks: which options take a value from a list, which must be ``>= 0`` and which ``> 0``.

Each refusal is one line naming the module and the field (:func:`~fedhet.modules.options.check_options`), raised when
the module is built, before training starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.modules.options import check_options

CHOICES: dict[str, tuple[str, ...]] = {
    "variant": ("class", "hl"),
    "network": ("auto", "mlp", "cnn"),
    "embedding_activation": ("relu", "leaky_relu"),
    "anchor_stats": ("closed_form", "sampled"),
    "anchor_update": ("paper", "code"),
    "anchor_weighting": ("uniform", "samples"),
    "covariance_aggregation": ("bures", "cholesky_mean"),
}
"""The options that take one of a few values, with those values."""
NON_NEGATIVE = (
    "lambda_align",
    "lambda_anchor",
    "pretrain_epochs",
    "realign_epochs",
    "rep_epochs",
    "rep_start_round",
    "weight_decay",
)
"""The options that must be ``>= 0``."""
POSITIVE = (
    "latent_dim",
    "hidden_width",
    "anchor_variance",
    "anchor_lr",
    "pretrain_lr",
    "anchor_samples",
    "pretrain_batch_size",
    "final_local_epochs",
)
"""The options that must be ``> 0`` (or ``None`` where the option allows it)."""


def check_flic_options(owner: str, options: Mapping[str, Any]) -> None:
    """Refuse the first of FLIC's options out of its range, in the order choices, ``>= 0``, ``> 0``.

    Args:
        owner: the module's name, for the message.
        options: the constructor's arguments by name (at least those of :data:`CHOICES`, :data:`NON_NEGATIVE` and
            :data:`POSITIVE`).

    Raises:
        ValueError: ``"<owner>: field '<field>' must be ..."``.

    """
    check_options(
        owner,
        choices={name: (options[name], allowed) for name, allowed in CHOICES.items()},
        non_negative={name: options[name] for name in NON_NEGATIVE},
        positive={name: options[name] for name in POSITIVE},
    )
