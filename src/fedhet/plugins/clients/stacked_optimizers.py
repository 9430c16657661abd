"""Optimizers over a stack of clients: one of the module's own kind over the stacked tensors, and the kept states.

An element-wise optimizer (:data:`ELEMENTWISE_OPTIMIZERS`) over tensors stacked along a client axis is ``K``
independent optimizers (:func:`stacked_optimizer`). A module that keeps its optimizer state between rounds (Global
Layers' AdamW) has its clients' states stacked into the stack's optimizer (:func:`load_stacked_state`) and split back
after (:func:`unstacked_states`); clients share a stack only if their states agree on the scalars
(:func:`scalar_state`, e.g. step counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import SGD, Adagrad, Adam, Adamax, AdamW, NAdam, Optimizer, RAdam, RMSprop

from fedhet.core import EngineModule

ELEMENTWISE_OPTIMIZERS: tuple[type[Optimizer], ...] = (SGD, Adam, AdamW, Adagrad, Adamax, NAdam, RAdam, RMSprop)
"""Optimizers whose step moves each element by its own gradient and state only, so that one of them over stacked
tensors equals one per client (subclasses are not trusted: they may step otherwise)."""


def optimizer_refusal(optimizer: Optimizer) -> str | None:
    """Why one optimizer over stacked tensors would not equal one per client, or ``None`` (an element-wise one)."""
    if type(optimizer) in ELEMENTWISE_OPTIMIZERS:
        return None
    names = ", ".join(cls.__name__ for cls in ELEMENTWISE_OPTIMIZERS)
    return f"its optimizer {type(optimizer).__name__} is not one of the element-wise optimizers ({names})"


def stacked_optimizer(
    optimizer: Optimizer,
    module: nn.Module | EngineModule,
    leaves: Mapping[str, Tensor],
    attributes: Iterable[str] = (),
) -> Optimizer:
    """An optimizer of ``optimizer``'s class, settings and parameter groups over the leaves standing for its parameters.

    Args:
        optimizer: an optimizer over (some of) ``module``'s parameters, or tensors that ``module`` holds as attributes.
        module: the module whose parameter names key ``leaves``.
        leaves: ``name -> (K, *shape)`` stacked tensors, one per parameter of ``module`` at least (and one per name
            of ``attributes`` that ``optimizer`` steps).
        attributes: names of ``module``'s tensor attributes that ``optimizer`` may step (e.g. FLIC's anchor copy).

    Raises:
        TypeError: when ``optimizer`` is not one of :data:`ELEMENTWISE_OPTIMIZERS`.

    """
    reason = optimizer_refusal(optimizer)
    if reason is not None:
        raise TypeError(f"cannot step stacked clients: {reason}")
    names = tensor_names(module, attributes)
    groups = [{**group, "params": [leaves[names[id(p)]] for p in group["params"]]} for group in optimizer.param_groups]
    optimizer_class: Callable[..., Optimizer] = type(optimizer)  # element-wise: its first argument takes the groups
    return optimizer_class(groups)  # every group holds all its settings


def tensor_names(module: nn.Module | EngineModule, attributes: Iterable[str]) -> dict[int, str]:
    """The names of ``module``'s parameters and of its tensor ``attributes``, by the tensors' ids."""
    names = {id(param): name for name, param in module.named_parameters()}
    names.update({id(getattr(module, name)): name for name in attributes if isinstance(getattr(module, name), Tensor)})
    return names


def optimizer_names(optimizer: Optimizer, module: nn.Module | EngineModule) -> list[str]:
    """The names of ``optimizer``'s parameters, in the order its ``state_dict()`` numbers them."""
    names = tensor_names(module, ())
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def load_stacked_state(
    optimizer: Optimizer, leaves: Sequence[Tensor], states: Sequence[Mapping[str, Any] | None]
) -> None:
    """Give the stacked ``optimizer`` its clients' kept states: per-element tensors stacked, scalars shared.

    ``leaves[i]`` stands for the parameter numbered ``i`` in the states. A parameter with no state in any client
    starts new; the clients must agree on which parameters have state and on the scalars (e.g. a step count).
    """
    if all(state is None for state in states):
        return
    if any(state is None for state in states):
        raise ValueError("a stack mixes clients with kept optimizer state and clients without")
    kept = [state for state in states if state is not None]
    for group, saved in zip(optimizer.param_groups, kept[0]["param_groups"], strict=True):
        group.update({key: value for key, value in saved.items() if key != "params"})  # as load_state_dict does
    for index, leaf in enumerate(leaves):
        per_client = [state["state"].get(index) for state in kept]
        if all(entry is None for entry in per_client):
            continue
        if any(entry is None for entry in per_client):
            raise ValueError(f"parameter {index}: some clients of the stack have optimizer state, others not")
        entries = [entry for entry in per_client if entry is not None]
        optimizer.state[leaf] = {key: _stacked_entry(key, [e[key] for e in entries], leaf) for key in entries[0]}


_SCALAR_STATE = ("step", "mu_product")
"""Optimizer state entries that are one number per parameter (step counts, NAdam's momentum product)."""


def _per_element(key: str, value: Any, shape: torch.Size) -> bool:
    """Whether an optimizer state entry holds one value per element of a parameter of ``shape``."""
    return isinstance(value, Tensor) and key not in _SCALAR_STATE and value.shape == shape


def _stacked_entry(key: str, values: Sequence[Any], leaf: Tensor) -> Any:
    """Per-element state (a tensor of the parameter's shape) stacked on the client axis; a scalar shared."""
    first = values[0]
    if _per_element(key, first, leaf.shape[1:]):
        return torch.empty_like(leaf).copy_(torch.stack([value.to(leaf.device) for value in values]))  # leaf's layout
    if any(not _equal(value, first) for value in values):
        raise ValueError("the clients of a stack must agree on their optimizer state's scalars (e.g. step counts)")
    return first.clone().to(leaf.device) if isinstance(first, Tensor) else first


def _equal(a: Any, b: Any) -> bool:
    return bool(torch.equal(a, b)) if isinstance(a, Tensor) and isinstance(b, Tensor) else a == b


def unstacked_states(
    optimizer: Optimizer, built: Optimizer, leaves: Sequence[Tensor], count: int
) -> list[dict[str, Any]]:
    """Each client's state of ``built`` (the module's own optimizer) after the stacked ``optimizer`` trained them."""
    params = [p for group in built.param_groups for p in group["params"]]
    for group, stacked in zip(built.param_groups, optimizer.param_groups, strict=True):
        group.update({key: value for key, value in stacked.items() if key != "params"})
    states = []
    for k in range(count):
        built.state.clear()
        for param, leaf in zip(params, leaves, strict=True):
            entry = optimizer.state.get(leaf)
            if entry:
                built.state[param] = {key: _client_entry(key, value, leaf, k) for key, value in entry.items()}
        states.append(built.state_dict())
    built.state.clear()
    return states


def _client_entry(key: str, value: Any, leaf: Tensor, k: int) -> Any:
    """Client ``k``'s part of one stacked optimizer state entry (a copy)."""
    if _per_element(key, value, leaf.shape):
        return value[k].clone(memory_format=torch.contiguous_format)
    return value.clone() if isinstance(value, Tensor) else value


def scalar_state(state: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """The scalars of a kept optimizer state (e.g. step counts): clients that train in one stack must share them."""
    if state is None:
        return None
    return tuple(
        (index, key, value.item() if isinstance(value, Tensor) else value)
        for index, entry in sorted(state["state"].items())
        for key, value in sorted(entry.items())
        if key in _SCALAR_STATE or not isinstance(value, Tensor)
    )
