"""Name-keyed aggregation of client states, the server step of FedAvg and of every method's shared parameters.

Besides the weighted mean, two robust statistics (Yin et al., 2018, "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates", ICML): the coordinate-wise median and the coordinate-wise trimmed mean, each over the
clients that hold a parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor


def _check_same_shape(name: str, value: Tensor, other: Tensor) -> None:
    """Refuse two clients' tensors of one parameter name with different shapes."""
    if value.shape != other.shape:
        raise ValueError(
            f"parameter '{name}' has shape {tuple(value.shape)} in one client and {tuple(other.shape)} in"
            " another: clients that share a parameter by name must give it the same shape"
        )


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
    running: list[Tensor] = []
    added: list[Tensor] = []
    for name, value in state.items():
        value = value.detach()
        if name in sums:
            _check_same_shape(name, value, sums[name])
        if value.is_floating_point():
            if name in sums:
                running.append(sums[name])
                added.append(value)
            else:
                sums[name] = value.to(torch.float64) * weight
            totals[name] = totals.get(name, 0.0) + weight
        else:
            sums[name] = torch.maximum(sums[name], value) if name in sums else value.clone()
            totals.setdefault(name, 0.0)
    if running:  # sum += weight * value for each, accumulated in the sums' float64: one call, each tensor's add_
        torch._foreach_add_(running, added, alpha=weight)


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


def trim_count(beta: float, num_holders: int) -> int:
    """How many values :func:`trimmed_mean` drops at each end: ``floor(beta * num_holders)``.

    The rule of ``scipy.stats.trim_mean`` and of Flower's ``FedTrimmedAvg`` (both compute ``int(beta * n)``), so a
    non-integer ``beta * n`` is rounded down: ``beta=0.2`` trims one of 5 to 9 holders at each end and none of 4.

    Args:
        beta: the fraction trimmed at each end, in ``[0, 0.5)``.
        num_holders: the number of clients holding the parameter.

    Returns:
        The number of values dropped at each end, at most ``(num_holders - 1) // 2``.

    """
    if not 0.0 <= beta < 0.5:
        raise ValueError(f"field 'beta' must be in [0, 0.5), got {beta}")
    return int(beta * num_holders)


def coordinate_median(states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    r"""Coordinate-wise median of client states, parameter by parameter, each over the clients that hold it.

    .. math:: \bar\theta_{p,i} = \operatorname{median}_{k \in H_p} \theta_{k,p,i}

    For an even number of holders this is the **mean of the two middle values** (as ``numpy.median`` and Flower's
    ``FedMedian``), not ``torch.median``'s lower middle value. Robust to any values from fewer than half of a
    parameter's holders (Yin et al., 2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
    ICML); clients are not weighted.

    Args:
        states: one mapping ``name -> tensor`` per client; clients may hold different subsets of names, but a name
            has the same shape ``P`` everywhere (its ``n`` holders are stacked to ``(n, *P)``).

    Returns:
        The medians, keyed by name, each of shape ``P`` and in the parameter's original dtype; integer tensors
        (e.g. a batch-norm's ``num_batches_tracked``) get the same statistic rounded to the nearest integer.
        Independent of the order of ``states``, bit for bit.

    Example:
        >>> states = [{"w": torch.tensor(pair)} for pair in ([0.0, 1.0], [2.0, 3.0], [100.0, 2.0])]
        >>> coordinate_median(states)["w"].tolist()
        [2.0, 2.0]

    """
    return _order_statistic(states, lambda n: (n - 1) // 2)


def trimmed_mean(states: Sequence[Mapping[str, Tensor]], beta: float) -> dict[str, Tensor]:
    r"""Coordinate-wise trimmed mean of client states, parameter by parameter, each over the clients that hold it.

    For each coordinate the ``b = floor(beta * n)`` largest and ``b`` smallest of the ``n`` holders' values are
    dropped and the rest averaged (:func:`trim_count`; as ``scipy.stats.trim_mean`` and Flower's ``FedTrimmedAvg``):

    .. math:: \bar\theta_{p,i} = \frac{1}{n - 2b} \sum_{j=b+1}^{n-b} \theta_{(j),p,i}

    with :math:`\theta_{(j)}` the j-th smallest value. Robust to up to ``b`` arbitrary values at each end (Yin et al.,
    2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates", ICML); ``beta=0`` is the uniform
    mean. Clients are not weighted.

    Args:
        states: one mapping ``name -> tensor`` per client; clients may hold different subsets of names, but a name
            has the same shape ``P`` everywhere (its ``n`` holders are stacked to ``(n, *P)``).
        beta: the fraction trimmed at each end, in ``[0, 0.5)``.

    Returns:
        The trimmed means, keyed by name, each of shape ``P`` and in the parameter's original dtype (integer
        tensors rounded to the nearest integer). Independent of the order of ``states``, bit for bit.

    Example:
        >>> states = [{"w": torch.tensor([float(v)])} for v in (1, 2, 3, 4, 1000)]
        >>> trimmed_mean(states, beta=0.2)["w"].tolist()
        [3.0]

    """
    trim_count(beta, 1)  # validates beta even when no state holds anything
    return _order_statistic(states, lambda n: trim_count(beta, n))


def _order_statistic(states: Sequence[Mapping[str, Tensor]], trim: Callable[[int], int]) -> dict[str, Tensor]:
    """Mean of the sorted holders' values left after dropping ``trim(n)`` at each end, per parameter name.

    The median is the case ``trim(n) = (n - 1) // 2`` (one middle value, or the two middle ones for even ``n``).
    Values are stacked on a leading client dimension (shape ``(n, *param_shape)``) and sorted along it, so the result
    does not depend on the order of the clients; the kept values are summed in float64.
    """
    holders: dict[str, list[Tensor]] = {}
    for state in states:
        for name, value in state.items():
            kept = holders.setdefault(name, [])
            if kept:
                _check_same_shape(name, value, kept[0])
            kept.append(value.detach())
    out = {}
    for name, values in holders.items():
        dtype = values[0].dtype
        stacked = torch.stack(values) if dtype.is_floating_point else torch.stack(values).to(torch.float64)
        n = stacked.shape[0]
        cut = trim(n)
        middle = torch.sort(stacked, dim=0).values[cut : n - cut].to(torch.float64)
        value = middle.sum(dim=0) / middle.shape[0]
        out[name] = (value if dtype.is_floating_point else value.round()).to(dtype)
    return out
