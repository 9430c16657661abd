"""One client's local work, driven through Fabric with the module's own Lightning hooks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import nullcontext
from typing import Any, cast

import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import Precision
from torch.optim import Optimizer

from fedhet.core import EngineModule, LocalPhase


def configure_optimizer(module: EngineModule) -> Optimizer:
    """The single optimizer of ``module.configure_optimizers()`` (bare, in a list, or under ``"optimizer"``)."""
    config: Any = module.configure_optimizers()
    if isinstance(config, Mapping):
        config = config.get("optimizer")
    if isinstance(config, (list, tuple)) and len(config) == 1:
        config = config[0]
    if not isinstance(config, Optimizer):
        raise TypeError(
            f"{type(module).__name__}.configure_optimizers() must return one optimizer for federated local training,"
            f" got {type(config).__name__}"
        )
    return config


def phase_batches(loader: Iterable, phase: LocalPhase, local_epochs: int, local_steps: int | None) -> Iterable[Any]:
    """The batches of one local phase: its own steps or epochs, else ``local_steps``, else ``local_epochs`` passes."""
    steps = phase.steps if phase.steps is not None else (local_steps if phase.epochs is None else None)
    epochs = phase.epochs if phase.epochs is not None else local_epochs
    return _batches(loader, epochs, steps)


def _batches(loader: Iterable, epochs: int, steps: int | None) -> Iterable[Any]:
    """Batches over ``epochs`` passes of ``loader``, or exactly ``steps`` batches cycling it when ``steps`` is set."""
    if steps is None and epochs == 1:
        return loader
    return _cycled(loader, epochs, steps)


def _cycled(loader: Iterable, epochs: int, steps: int | None) -> Iterator[Any]:
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


def run_local_training(
    fabric: Fabric,
    module: EngineModule,
    loader: Iterable,
    phases: list[LocalPhase],
    local_epochs: int,
    local_steps: int | None,
    optimizer_state: dict[str, Any] | None = None,
    keep_optimizer_state: bool = False,
) -> tuple[dict[str, float], dict[str, Any] | None]:
    """Train ``module`` on one client's ``loader`` through its phases, with its own ``training_step``.

    One optimizer from ``configure_optimizers()`` serves every phase; a phase freezes the parameters it does not
    train, so they get no gradient and the optimizer leaves them alone (FedRep's head-then-body schedule).

    Args:
        fabric: the run's Fabric (device, precision, backward).
        module: the client's module, already on ``fabric.device`` with its state loaded.
        loader: the client's training batches.
        phases: the module's local schedule.
        local_epochs: epochs of a phase whose ``epochs`` is ``None``.
        local_steps: if set, optimizer steps of a phase whose ``steps`` is ``None`` (overrides epochs).
        optimizer_state: optimizer state from the client's previous round, for methods that keep it.
        keep_optimizer_state: return the optimizer's state for the next round.

    Returns:
        ``({"loss": mean training loss, "steps": optimizer steps, **the mean of each name the module logged},
        optimizer state dict or None)``.

    """
    optimizer = configure_optimizer(module)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    # full precision needs none of Fabric's loss scaling or autocast: skip their per-step dispatch
    plain = type(fabric.strategy.precision) is Precision
    # one optimizer in, one Fabric-wrapped optimizer out
    step_optimizer = optimizer if plain else cast(Optimizer, fabric.setup_optimizers(optimizer))
    autocast = nullcontext if plain else fabric.autocast
    backward = torch.Tensor.backward if plain else fabric.backward
    if not module.training:
        module.train()
    move = fabric.device.type != "cpu"  # in-memory CPU batches need no per-step device dispatch on a CPU run
    losses: list[torch.Tensor] = []
    module.local_train_loader = loader  # the module's statistics passes see the same batches (train_batches())
    module.local_logs = {}  # what the module's self.log records, averaged into the client's metrics below
    module.on_train_start()
    for phase in phases:
        module.set_local_phase(phase)
        for batch_idx, batch in enumerate(phase_batches(loader, phase, local_epochs, local_steps)):
            if move:
                batch = fabric.to_device(batch)
            with autocast():
                output = module.training_step(batch, batch_idx)
            loss = output if isinstance(output, torch.Tensor) else output["loss"]
            backward(loss)
            step_optimizer.step()
            step_optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
    module.set_local_phase(None)
    module.on_train_end()
    module.local_train_loader = None
    logged, module.local_logs = module.local_logs, None
    if not losses:
        mean_loss = 0.0
    elif move:  # one device-to-host read
        mean_loss = torch.stack(losses).double().mean().item()
    else:  # CPU scalars: reading each is cheaper than stacking them
        mean_loss = sum(loss.item() for loss in losses) / len(losses)
    metrics = {name: torch.stack(values).double().mean().item() for name, values in (logged or {}).items() if values}
    metrics.update({"loss": mean_loss, "steps": float(len(losses))})
    return metrics, optimizer.state_dict() if keep_optimizer_state else None


@torch.no_grad()
def evaluate_client(fabric: Fabric, module: EngineModule, loader: Iterable, stage: str) -> dict[str, float]:
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
    return {name: float(value) for name, value in metrics.compute().items()}
