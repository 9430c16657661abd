"""Local training: a client's schedule, its set-up in its module, and the one loop over phases and batches.

:func:`run_phases` is the loop of every local training, for one client or a stack of ``K``: it sets each phase in the
module and runs a step on each batch; the step is what differs with the group (:mod:`fedhet.plugins.clients.local_step`:
the module's own ``training_step`` for one client, as :func:`run_local_training` and a stack's preparation phases run
it; the ``vmap`` of the clients' losses for a stack, :func:`~fedhet.plugins.clients.stacked.train_stack`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from lightning.fabric import Fabric
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from fedhet.core import EngineModule, LocalPhase, LocalTraining
from fedhet.datamodules.tensor_dataset import TensorBatchLoader, TensorPairDataset
from fedhet.plugins.clients.local_step import LocalStep, ModuleStep


def local_optimizers(module: EngineModule) -> list[Optimizer]:
    """The optimizers of ``module.configure_optimizers()``: one (bare or under ``"optimizer"``) or a list of them.

    Raises:
        TypeError: naming the module, when it returns anything else (e.g. a scheduler config the engine ignores).

    """
    config: Any = module.configure_optimizers()
    if isinstance(config, Mapping):
        config = config.get("optimizer")
    optimizers = list(config) if isinstance(config, (list, tuple)) else [config]
    if not optimizers or not all(isinstance(optimizer, Optimizer) for optimizer in optimizers):
        raise TypeError(
            f"{type(module).__name__}.configure_optimizers() must return an optimizer or a list of optimizers for"
            f" federated local training, got {type(config).__name__}"
        )
    return optimizers


def check_phase_optimizers(module: EngineModule, phases: Iterable[LocalPhase], count: int) -> None:
    """Refuse a phase that names an optimizer ``configure_optimizers()`` does not give (it gives ``count``).

    Raises:
        ValueError: naming the module, the phase and the optimizer.

    """
    for phase in phases:
        if not phase.optimizers or not all(0 <= index < count for index in phase.optimizers):
            raise ValueError(
                f"{type(module).__name__}: local phase '{phase.name}' names optimizer {phase.optimizer}, but"
                f" configure_optimizers() gives {count}"
            )


def phase_batches(
    loader: Iterable[Any], phase: LocalPhase, local_epochs: int, local_steps: int | None
) -> Iterable[Any]:
    """The batches of one local phase: its own steps or epochs, else ``local_steps``, else ``local_epochs`` passes."""
    steps = phase.steps if phase.steps is not None else (local_steps if phase.epochs is None else None)
    epochs = phase.epochs if phase.epochs is not None else local_epochs
    return _batches(loader, epochs, steps)


def phase_loader(loader: Iterable[Any], phase: LocalPhase) -> Iterable[Any]:
    """The loader a phase iterates: the client's, or shuffled batches of ``phase.batch_size`` from its training set.

    Raises:
        TypeError: naming the phase, when it sets ``batch_size`` but the client's loader has no ``dataset``.

    """
    if phase.batch_size is None:
        return loader
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise TypeError(
            f"local phase '{phase.name}' sets batch_size, but the client's loader ({type(loader).__name__}) has no"
            " dataset to draw its batches from"
        )
    if isinstance(dataset, TensorPairDataset):
        return TensorBatchLoader(dataset, phase.batch_size, shuffle=True)
    return DataLoader(dataset, batch_size=phase.batch_size, shuffle=True)


def local_schedule(
    fabric: Fabric,
    loader: Iterable[Any],
    phases: Sequence[LocalPhase],
    local_epochs: int,
    local_steps: int | None,
) -> Iterator[tuple[LocalPhase, Iterable[Any]]]:
    """A client's local schedule, the one both the sequential and the stacked path follow: each phase, its batches.

    A phase's batches come from its own loader (:func:`phase_loader`) for its steps or epochs (:func:`phase_batches`),
    drawn lazily as they are iterated (so a module's own draws between batches keep their place in the stream) and
    moved to the run's device (on CPU they stay as the loader gives them: no per-step dispatch).

    Args:
        fabric: the run's Fabric (its device).
        loader: the client's training batches.
        phases: the phases, in order.
        local_epochs: epochs of a phase whose ``epochs`` is ``None``.
        local_steps: if set, optimizer steps of a phase whose ``steps`` is ``None``.

    Yields:
        ``(phase, its batches)``, a phase's batches to be iterated before the next phase is taken.

    """
    to_device = fabric.to_device if fabric.device.type != "cpu" else None
    for phase in phases:
        batches = phase_batches(phase_loader(loader, phase), phase, local_epochs, local_steps)
        yield phase, batches if to_device is None else map(to_device, batches)


def _batches(loader: Iterable[Any], epochs: int, steps: int | None) -> Iterable[Any]:
    """Batches over ``epochs`` passes of ``loader``, or exactly ``steps`` batches cycling it when ``steps`` is set."""
    if steps is None and epochs == 1:
        return loader
    return _cycled(loader, epochs, steps)


def _cycled(loader: Iterable[Any], epochs: int, steps: int | None) -> Iterator[Any]:
    if steps is None:
        for _ in range(epochs):
            yield from loader
        return
    taken = 0
    while taken < steps:
        before = taken
        for batch in loader:
            yield batch
            taken += 1
            if taken == steps:
                return
        if taken == before:  # an empty loader would cycle forever
            return


@contextmanager
def local_training(
    module: EngineModule,
    loader: Iterable[Any],
    phases: Sequence[LocalPhase],
    optimizers: Callable[[], list[Optimizer]] | None = None,
) -> Iterator[tuple[LocalTraining, list[Optimizer]]]:
    """A client's local training set up in its module, as both the sequential and the stacked path start it.

    The module gets a :class:`~fedhet.core.LocalTraining` of ``loader`` and ``phases`` (before its optimizers are
    built: a module may build what its phases step, e.g. FLIC's anchor copy), its optimizers are built and checked
    against the phases, and it is put in training mode; the ``LocalTraining`` is taken back on leaving, also on an
    error.

    Args:
        module: the client's module.
        loader: the client's training batches (empty when only the optimizers are wanted).
        phases: the phases the module will run.
        optimizers: gives the optimizers, as new (e.g. :meth:`ModuleSlot.optimizers
            <fedhet.plugins.clients.slots.ModuleSlot.optimizers>`); ``None`` builds them with
            ``configure_optimizers()``.

    Yields:
        the ``LocalTraining`` (its ``logs`` collect what the module logs) and the built optimizers.

    Raises:
        ValueError: a phase names an optimizer that ``configure_optimizers()`` does not give.

    """
    training = LocalTraining(loader, tuple(phases))
    module.set_local_training(training)
    try:
        built = optimizers() if optimizers is not None else local_optimizers(module)
        check_phase_optimizers(module, phases, len(built))
        if not module.training:
            module.train()
        yield training, built
    finally:
        module.set_local_training(None)


@contextmanager
def started_client(
    fabric: Fabric,
    module: EngineModule,
    loader: Iterable[Any],
    phases: Sequence[LocalPhase],
    optimizers: Callable[[], list[Optimizer]] | None = None,
    optimizer_state: dict[str, Any] | list[dict[str, Any]] | None = None,
) -> Iterator[tuple[LocalTraining, ModuleStep]]:
    """A client started as both runners start it: set up, given its kept optimizer state, ``on_train_start`` run.

    Through :func:`local_training` (its ``LocalTraining`` of ``loader`` and ``phases``, its optimizers built); the
    optimizers get the state the client kept from its last round, and the module's ``on_train_start`` runs.

    Args:
        fabric: the run's Fabric (device, precision, backward).
        module: the client's module, already on ``fabric.device`` with its state loaded.
        loader: the client's training batches.
        phases: every phase the module will run in this training.
        optimizers: gives the optimizers, as new; ``None`` builds them with ``configure_optimizers()``.
        optimizer_state: the optimizers' state from the client's previous round (a list for several optimizers).

    Yields:
        the ``LocalTraining`` (its ``logs`` collect what the module logs) and the step over the built optimizers.

    """
    with local_training(module, loader, phases, optimizers) as (training, built):
        if optimizer_state is not None:
            states = optimizer_state if isinstance(optimizer_state, list) else [optimizer_state]
            for optimizer, state in zip(built, states, strict=True):
                optimizer.load_state_dict(state)
        module.on_train_start()
        yield training, ModuleStep(fabric, module, built)


def run_local_training(
    fabric: Fabric,
    module: EngineModule,
    loader: Iterable[Any],
    phases: list[LocalPhase],
    local_epochs: int,
    local_steps: int | None,
    optimizer_state: dict[str, Any] | list[dict[str, Any]] | None = None,
    keep_optimizer_state: bool = False,
    optimizers: Callable[[], list[Optimizer]] | None = None,
) -> tuple[dict[str, float], dict[str, Any] | list[dict[str, Any]] | None]:
    """Train ``module`` on one client's ``loader`` through its phases, with its own ``training_step``.

    The module first gets a :class:`~fedhet.core.LocalTraining` (the batches, the phases, a place for its logs) through
    ``set_local_training``; then the optimizers of ``configure_optimizers()`` are built once; each phase steps the
    ones it names (:attr:`~fedhet.core.LocalPhase.optimizer`, the first by default) after each backward pass and
    freezes the parameters it does not train, so they get no gradient and the optimizer leaves them alone (FedRep's
    head-then-body schedule). The phases run in the one local loop (:func:`run_phases`) with the module's own step
    (:class:`~fedhet.plugins.clients.local_step.ModuleStep`).

    Args:
        fabric: the run's Fabric (device, precision, backward).
        module: the client's module, already on ``fabric.device`` with its state loaded.
        loader: the client's training batches.
        phases: the module's local schedule.
        local_epochs: epochs of a phase whose ``epochs`` is ``None``.
        local_steps: if set, optimizer steps of a phase whose ``steps`` is ``None`` (overrides epochs).
        optimizer_state: optimizer state from the client's previous round, for methods that keep it (a list of states
            when the module has several optimizers).
        keep_optimizer_state: return the optimizers' state for the next round.
        optimizers: gives the optimizers to step, as new (e.g. :meth:`ModuleSlot.optimizers
            <fedhet.plugins.clients.slots.ModuleSlot.optimizers>`), called once the module holds its ``LocalTraining``;
            ``None`` builds them with ``configure_optimizers()``.

    Returns:
        ``({"loss": mean training loss, "steps": batches trained on, **the mean loss of each phase with a loss_key of
        its own, **the mean of each name the module logged}, optimizer state dict or None)``.

    """
    with started_client(fabric, module, loader, phases, optimizers, optimizer_state) as (training, step):
        losses = run_phases(module, step, local_schedule(fabric, loader, phases, local_epochs, local_steps))
        module.on_train_end()
    metrics = local_metrics(training.logs, losses, fabric.device.type != "cpu")
    if not keep_optimizer_state:
        return metrics, None
    states = [optimizer.state_dict() for optimizer in step.built]
    return metrics, states[0] if len(states) == 1 else states


def run_phases(
    module: EngineModule, step: LocalStep, schedule: Iterable[tuple[LocalPhase, Iterable[Any]]]
) -> dict[str, list[torch.Tensor]]:
    """The local loop, for one client or a stack of them: each phase of ``schedule``, each of its batches a ``step``.

    Each phase is set in the module (``set_local_phase``: it freezes what the phase does not train) and taken up by
    the step (the optimizers it names); the phase is left after the last, also on an error. The step is what differs
    with the size of the group (:mod:`fedhet.plugins.clients.local_step`): the module's own ``training_step`` for one
    client, the ``vmap`` of their losses for a stack.

    Args:
        module: the module (a client's, holding its ``LocalTraining``; or a stack's architecture).
        step: trains on one batch of the group.
        schedule: each phase with its batches (:func:`local_schedule`; for a stack, the clients' batches of each step).

    Returns:
        each step's loss (a scalar, or ``(K,)`` for a stack) under its phase's ``loss_key`` (``"loss"`` always present).

    """
    losses: dict[str, list[torch.Tensor]] = {"loss": []}
    try:
        for phase, batches in schedule:
            module.set_local_phase(phase)
            step.enter(phase)
            phase_losses = losses.setdefault(phase.loss_key, [])
            for batch_idx, batch in enumerate(batches):
                phase_losses.append(step(batch, batch_idx))
    finally:
        module.set_local_phase(None)
    return losses


def local_metrics(
    logs: Mapping[str, list[torch.Tensor]], losses: Mapping[str, list[torch.Tensor]], on_device: bool
) -> dict[str, float]:
    """A client's training metrics: the mean of each logged name and of each phase loss key, and the steps taken."""
    metrics = {name: _mean(values, on_device) for name, values in logs.items() if values}
    metrics.update({key: _mean(values, on_device) if values else 0.0 for key, values in losses.items()})
    metrics["steps"] = float(sum(len(values) for values in losses.values()))
    return metrics


def _mean(values: list[torch.Tensor], on_device: bool) -> float:
    """The mean of scalar tensors, in float64: one device-to-host read on an accelerator, else one read each."""
    if on_device:
        return torch.stack(values).double().mean().item()
    return sum(value.item() for value in values) / len(values)  # CPU scalars: cheaper than stacking them


@torch.no_grad()
def evaluate_client(fabric: Fabric, module: EngineModule, loader: Iterable[Any], stage: str) -> dict[str, float]:
    """Run ``validation_step`` (``stage="val"``) or ``test_step`` over ``loader`` and compute the module's metrics."""
    metrics = module.evaluation_metrics(stage)
    if fabric.world_size > 1 and any(m.sync_on_compute for m in metrics.values()):
        raise ValueError(
            f"{type(module).__name__}.evaluation_metrics('{stage}') must be built with sync_on_compute=False: each"
            " process evaluates different clients, so a client's metrics must not be reduced across processes"
        )
    metrics.reset()
    step = module.validation_step if stage == "val" else module.test_step
    module.eval()
    for batch_idx, batch in enumerate(loader):
        with fabric.autocast():
            step(fabric.to_device(batch), batch_idx)
    module.train()
    return {name: float(value) for name, value in computed_metrics(metrics).items()}


def computed_metrics(metrics: Any) -> dict[str, torch.Tensor]:
    """The values of the metrics of a ``MetricCollection`` that this client updated.

    A metric a client never updates is not one of its metrics (FedDaDiL's ``source_acc`` on the unlabelled target):
    it is left out, so the summaries over clients average it over the clients that have it.
    """
    updated = {name for name, metric in metrics.items() if metric.update_called}
    for group in getattr(metrics, "compute_groups", {}).values():  # members of a group share the updated states
        if updated & set(group):
            updated |= set(group)
    if len(updated) == len(metrics):
        return dict(metrics.compute())
    return {name: metric.compute() for name, metric in metrics.items() if name in updated}
