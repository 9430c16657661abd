"""The two kinds of local step that the one local loop (:func:`~fedhet.plugins.clients.local_loop.run_phases`) drives.

* :class:`ModuleStep` — one client in its module: the module's own ``training_step``, Fabric's backward, the phase's
  optimizers (any module; the sequential runner, preparation phases, adaptation).
* :class:`StackedStep` — ``K`` clients of one architecture at once: each client's loss computed with its own slices
  of the stacked tensors by ``torch.func.functional_call`` under ``torch.func.vmap``, one backward of their sum, the
  stacked optimizers (:mod:`fedhet.plugins.clients.stacked`).

A stack of one client is not the sequential path's step: measured on ``benchmarks/stacked_methods.py``'s workload, the
functional step of a stack of one takes about three times as long per round as the module's own (FedAvg, FedPAC), so
a lone client always takes :class:`ModuleStep`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from functools import partial
from typing import Any, Protocol, cast

import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import Precision
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.optim import Optimizer

from fedhet.core import EngineModule, LocalPhase
from fedhet.functional.stacking import masked_mean, stack_padded


class LocalStep(Protocol):
    """One optimisation step of a group of clients on a batch of each, stepping the optimizers its phase names."""

    def enter(self, phase: LocalPhase) -> None:
        """Take up ``phase`` (after ``module.set_local_phase(phase)`` froze what it does not train)."""

    def __call__(self, batch: Any, batch_idx: int) -> Tensor:
        """Train on ``batch`` (the group's batch of this step); the loss, detached: a scalar, or ``(K,)``."""


class ModuleStep:
    """One client's step in its module: ``training_step``, backward, then each optimizer the phase names.

    Args:
        fabric: the run's Fabric (device, precision, backward).
        module: the client's module, holding its ``LocalTraining``.
        optimizers: the module's optimizers (``configure_optimizers()``), as built.

    """

    def __init__(self, fabric: Fabric, module: EngineModule, optimizers: Sequence[Optimizer]) -> None:
        # full precision needs none of Fabric's loss scaling or autocast: skip their per-step dispatch
        plain = type(fabric.strategy.precision) is Precision
        wrapped = fabric.setup_optimizers(*optimizers) if not plain and optimizers else optimizers
        self.built = list(optimizers)
        """The optimizers as built (their ``state_dict()`` is the client's kept state)."""
        self.optimizers = cast(list[Optimizer], list(wrapped) if isinstance(wrapped, (list, tuple)) else [wrapped])
        """The optimizers it steps (under mixed precision, Fabric's wrappers of :attr:`built`)."""
        self.module = module
        self._autocast = nullcontext if plain else fabric.autocast
        self._backward = torch.Tensor.backward if plain else fabric.backward
        self._stepped: list[Optimizer] = []

    def enter(self, phase: LocalPhase) -> None:
        """Step the optimizers ``phase`` names."""
        self._stepped = [self.optimizers[index] for index in phase.optimizers]

    def __call__(self, batch: Any, batch_idx: int) -> Tensor:
        """The module's ``training_step`` on ``batch``, back-propagated and stepped; its loss."""
        with self._autocast():
            output = self.module.training_step(batch, batch_idx)
        loss = output if isinstance(output, torch.Tensor) else output["loss"]
        self._backward(loss)
        for optimizer in self._stepped:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()


class _SampleLosses(nn.Module):
    """A client's loss on a padded batch as a ``forward`` (``torch.func.functional_call`` calls ``forward``).

    The mean of ``module.sample_losses`` over the real rows, or (``batch_loss``) a
    :class:`~fedhet.core.BatchLossModule`'s ``masked_loss``.
    """

    def __init__(self, module: EngineModule, batch_loss: bool) -> None:
        super().__init__()
        self.module: Any = module  # a stackable module: it has sample_losses (and maybe local_penalty, masked_loss)
        self.batch_loss = batch_loss

    def forward(self, batch: Sequence[Tensor], mask: Tensor) -> Tensor:
        if self.batch_loss:
            return cast(Tensor, self.module.masked_loss(batch, mask))
        return masked_mean(self.module.sample_losses(batch), mask)


def _client_loss(losses: _SampleLosses, state: dict[str, Tensor], batch: list[Tensor], mask: Tensor) -> Tensor:
    """One client's loss over the real rows (``mask``) of its padded batch, with its own tensors (``state``)."""
    return cast(Tensor, functional_call(losses, state, (batch, mask)))


def _penalised_client_loss(
    losses: _SampleLosses,
    state: dict[str, Tensor],
    batch: list[Tensor],
    mask: Tensor,
    params: dict[str, Tensor],
    received: dict[str, Tensor],
) -> Tensor:
    """:func:`_client_loss` plus the module's ``local_penalty`` of the client's parameters and received ones."""
    return cast(Tensor, _client_loss(losses, state, batch, mask) + losses.module.local_penalty(params, received))


class StackedStep:
    """``K`` clients' step at once: their losses under ``vmap``, one backward of their sum, the stacked optimizers.

    A batch is the ``K`` clients' batches of one step (zero-padded to the longest, see
    :func:`~fedhet.functional.stack_padded`); each client's loss is the masked mean of ``module.sample_losses`` or its
    ``masked_loss`` (``batch_loss``), plus its ``local_penalty`` to its state before training (``penalised``: FedProx).

    Args:
        module: a stackable module (:func:`~fedhet.plugins.clients.stacked.stacking_refusal`); its own tensors are not
            used.
        leaves: ``name -> (K, *shape)``: the stacked tensors the losses are computed with, one per tensor of the
            module's state at least (and one per attribute that replaces the module's for each client).
        optimizers: the stacked optimizers, in the module's order
            (:func:`~fedhet.plugins.clients.stacked_optimizers.stacked_optimizer`).
        batch_loss: the loss is ``masked_loss`` (a :class:`~fedhet.core.BatchLossModule`), not ``sample_losses``.
        penalised: add each client's ``local_penalty`` (a :class:`~fedhet.core.PenalisedModule`).

    """

    def __init__(
        self,
        module: EngineModule,
        leaves: Mapping[str, Tensor],
        optimizers: Sequence[Optimizer],
        batch_loss: bool = False,
        penalised: bool = False,
    ) -> None:
        self.optimizers = list(optimizers)
        self._params = {name: (param, leaves[name]) for name, param in module.named_parameters()}
        self._named = {f"module.{name}": leaf for name, leaf in leaves.items()}  # the names under _SampleLosses
        self._extra: tuple[dict[str, Tensor], ...] = ()
        if penalised:  # each client's anchor is its state before training
            params = {name: leaf for name, (_, leaf) in self._params.items()}
            self._extra = (params, {name: leaf.detach().clone() for name, leaf in params.items()})
        loss = _penalised_client_loss if penalised else _client_loss
        self._losses = vmap(partial(loss, _SampleLosses(module, batch_loss)))
        self._stepped: list[Optimizer] = []

    def enter(self, phase: LocalPhase) -> None:
        """Train the leaves of the parameters the phase leaves trainable; step the optimizers it names."""
        for param, leaf in self._params.values():
            leaf.requires_grad_(param.requires_grad)
        self._stepped = [self.optimizers[index] for index in phase.optimizers]

    def __call__(self, batch: Sequence[Sequence[Tensor]], batch_idx: int) -> Tensor:
        """The ``K`` clients' losses ``(K,)`` on their batches of this step, back-propagated and stepped."""
        tensors, mask = stack_padded(batch)
        loss = self._losses(self._named, tensors, mask, *self._extra)
        loss.sum().backward()
        for optimizer in self._stepped:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()
