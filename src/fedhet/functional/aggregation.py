"""Name-keyed averaging of client states, the server step of FedAvg and of every method's shared parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor


def weighted_mean_update(
    sums: dict[str, Tensor], totals: dict[str, float], state: Mapping[str, Tensor], weight: float
) -> None:
    """Fold one client's state into running weighted sums, in place (one step of a streaming :func:`weighted_mean`).

    Floating tensors are accumulated in float64 as ``weight * value``; integer tensors (e.g. a batch-norm's
    ``num_batches_tracked``) keep their element-wise maximum, since averaging a counter has no meaning.

    Args:
        sums: running sums, keyed by parameter name; updated in place.
        totals: running total weight per name (only the clients that hold a name count for it); updated in place.
        state: the client's tensors, keyed by parameter name.
        weight: the client's non-negative weight.

    """
    if weight < 0:
        raise ValueError(f"aggregation weights must be non-negative, got {weight}")
    for name, value in state.items():
        value = value.detach()
        if name in sums and sums[name].shape != value.shape:
            raise ValueError(
                f"parameter '{name}' has shape {tuple(value.shape)} in one client and {tuple(sums[name].shape)} in"
                " another: clients that share a parameter by name must give it the same shape"
            )
        if value.is_floating_point():
            if name in sums:
                sums[name].add_(value, alpha=weight)  # accumulated in the sum's float64
            else:
                sums[name] = value.to(torch.float64) * weight
            totals[name] = totals.get(name, 0.0) + weight
        else:
            sums[name] = torch.maximum(sums[name], value) if name in sums else value.clone()
            totals.setdefault(name, 0.0)


def weighted_mean_compute(
    sums: Mapping[str, Tensor], totals: Mapping[str, float], dtypes: Mapping[str, torch.dtype]
) -> dict[str, Tensor]:
    """Turn the running sums of :func:`weighted_mean_update` into means, cast back to each parameter's dtype.

    Args:
        sums: running sums, keyed by parameter name (float64 for floating tensors).
        totals: total weight per name.
        dtypes: each parameter's original dtype.

    Returns:
        The weighted means, keyed by name; integer tensors are returned as kept (their element-wise maximum).

    """
    out = {}
    for name, total in totals.items():
        value = sums[name]
        if value.is_floating_point():
            if total <= 0:
                raise ValueError(f"parameter '{name}' received a total weight of {total}; cannot average it")
            value = value / total
        out[name] = value.to(dtypes[name])
    return out


def weighted_mean(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | None = None) -> dict[str, Tensor]:
    r"""Average client states parameter by parameter, each over the clients that hold it.

    .. math:: \bar\theta_p = \frac{\sum_{k \in H_p} w_k \theta_{k,p}}{\sum_{k \in H_p} w_k}

    where :math:`H_p` is the set of clients whose state contains parameter :math:`p`. With ``weights`` the numbers
    of training samples this is FedAvg's server step (McMahan et al., 2017, "Communication-Efficient Learning of Deep
    Networks from Decentralized Data", AISTATS).

    Args:
        states: one mapping ``name -> tensor`` per client; clients may hold different subsets of names, but a name
            has the same shape everywhere.
        weights: one non-negative weight per client; uniform when ``None``.

    Returns:
        The averaged tensors, keyed by name, in each parameter's original dtype.

    Example:
        >>> a = {"w": torch.tensor([0.0, 2.0]), "b": torch.tensor(1.0)}
        >>> b = {"w": torch.tensor([2.0, 4.0])}
        >>> out = weighted_mean([a, b], weights=[1.0, 3.0])
        >>> out["w"].tolist(), out["b"].item()
        ([1.5, 3.5], 1.0)

    """
    if weights is None:
        weights = [1.0] * len(states)
    if len(weights) != len(states):
        raise ValueError(f"got {len(states)} states but {len(weights)} weights")
    sums: dict[str, Tensor] = {}
    totals: dict[str, float] = {}
    dtypes: dict[str, torch.dtype] = {}
    for state, weight in zip(states, weights, strict=True):
        weighted_mean_update(sums, totals, state, float(weight))
        dtypes.update({name: value.dtype for name, value in state.items()})
    return weighted_mean_compute(sums, totals, dtypes)
