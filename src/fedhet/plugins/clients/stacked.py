"""Training many clients of one architecture at once: their tensors stacked along a client axis, under ``torch.func``.

For small models the engine's time per client goes mostly to Python bookkeeping: loading the client into the module,
an optimizer per client, a few small steps. With ``FederatedTrainer(runner=StackedRunner(N))`` the clients of a
round that a process owns train in stacks of up to ``N``. Every tensor of their state is stacked into one
``(K, ...)`` leaf; each client's loss is the masked mean of the module's per-sample losses (``sample_losses``), plus
its ``local_penalty`` where the module has one (FedProx), computed by
``torch.func.functional_call`` of the module with that client's slices and vectorised over the clients by
``torch.func.vmap`` (PyTorch's ``torch.func``, after JAX's ``vmap``); one ``backward`` of the sum of the clients'
losses gives each slice exactly its own client's gradient, and one optimizer of the module's own kind and settings
steps the stacked leaves, which for an element-wise optimizer (SGD, Adam...) is K independent optimizers.

The results equal the sequential path's up to the order of floating-point sums (batched matrix products add in
another order): each client's batches come from its own loader under the seed the sequential path uses, a stack only
holds clients of one architecture and schedule that take the same number of steps in every phase, and short batches
are padded with zero rows that the loss leaves out. :func:`stacking_refusal` lists what a module must satisfy;
:func:`check_stacking` refuses the others with an error before training starts.

A module whose local hooks do per-client work (FedPAC: statistics of the received body before training, centroids of
the trained one after, uploaded as ``client_statistics()``; HyFEM: a restart from its anchors, a round counter, its
whole model uploaded) names in its ``stacking()`` the ``client_attributes`` those hooks set (possibly none): each
client's ``on_train_start`` then runs before its state is taken and its batches are drawn (as in the sequential
path), those attributes are kept per client (tensors among them go to ``sample_losses`` under ``vmap``),
and each trained client is loaded back for its ``on_train_end`` and ``client_statistics()``. A module that keeps its
optimizer state between rounds (Global Layers' AdamW) has its clients' states stacked into the stack's optimizer and
split back after; clients join one stack only if their states agree on the scalars (step counts).

A module may have several optimizers (each element-wise): each phase steps the ones it names, as on the sequential
path, each over the stacked leaves of its own parameters; an optimizer may also step tensors the module holds as
attributes named in its stacking's ``client_attributes`` (made per client by its ``configure_optimizers()``), which
then become trained leaves of their own (FLIC's anchor copy). A module's ``preparation_phases()`` (FLIC's
pre-training) run for each client, one at a time with its ``training_step``, before it joins a stack; its state and
their metrics are taken after them. A :class:`~fedhet.core.BatchLossModule` (FLIC: the :math:`W_2^2` between anchors
and the batch's class moments) gives ``masked_loss(batch, mask)``, called under ``vmap`` with shapes fixed by the
number of classes, and draws its step's random numbers with each batch (its stacking's ``draws``): the numbers its
sequential ``training_step`` draws, from the same stream in the same order. Each client's generator states are kept
once its batches and their draws are taken and put back for its ``on_train_end`` (FLIC's anchor step of the paper).
How each of FLIC's options stacks is in :class:`~fedhet.modules.FLIC`; a module with a layer that draws random numbers
(dropout) is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import Precision
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.dropout import _DropoutNd

from fedhet.core import (
    EngineModule,
    LocalPhase,
    PenalisedModule,
    RoundUploads,
    Stacking,
)
from fedhet.core.seeding import generator_states, seeded
from fedhet.functional.stacking import stack_states, unstack_states
from fedhet.plugins.clients.context import ClientContext, ClientJob, LocalResult
from fedhet.plugins.clients.local_loop import (
    local_optimizers,
    local_training,
    run_phases,
)
from fedhet.plugins.clients.local_step import StackedStep
from fedhet.plugins.clients.runners import LocalRunner
from fedhet.plugins.clients.stacked_optimizers import (
    ELEMENTWISE_OPTIMIZERS as ELEMENTWISE_OPTIMIZERS,  # what stacking_refusal accepts: part of this module's API
)
from fedhet.plugins.clients.stacked_optimizers import (
    load_stacked_state,
    optimizer_names,
    optimizer_refusal,
    scalar_state,
    stacked_optimizer,
    unstacked_states,
)

_LOSS_HOOKS = (
    "training_step",
    "step_loss",
    "on_train_start",
    "on_train_end",
    "client_statistics",
    "receive_statistics",
)
"""The hooks a subclass below ``sample_losses`` must not override; only the first two when the hooks run in stacks."""


_LOSSES = {"sample_losses": "per-sample losses of a batch", "masked_loss": "loss of a zero-padded batch"}


def stacking_refusal(module: EngineModule) -> str | None:
    """Why ``module`` cannot train clients in stacks with the sequential path's results, or ``None`` if it can.

    A stackable module (its layers built) declares a :class:`~fedhet.core.Stacking` (``stacking()``) and has a
    ``sample_losses`` method, and no subclass below the class that defines it overrides ``training_step`` or
    ``step_loss``, nor, unless its stacking names ``client_attributes`` (then the stacked path runs them for each
    client), ``on_train_start``, ``on_train_end``, ``client_statistics`` or ``receive_statistics`` (their
    work would be lost; a term that ``training_step`` adds to the mean loss belongs in ``local_penalty``, which the
    stacked path adds for each client, e.g. FedProx's proximal term); it uploads no statistics unless its stacking
    names ``client_attributes``, holds no layer that draws random numbers or normalises with batch statistics in the
    mode it trains in (dropout, BatchNorm in training mode: per-client results could not match; a BatchNorm in
    inference mode, as Global Layers keeps them, is an affine map of each client's own buffers), and its
    ``configure_optimizers()`` gives only :data:`ELEMENTWISE_OPTIMIZERS`. A :class:`~fedhet.core.BatchLossModule`
    (FLIC: its stacking has ``draws``) stands for ``sample_losses`` with ``masked_loss``; the stacking's ``refusal``
    refuses options of its own; ``preparation_phases`` (FLIC's pre-training) need ``client_attributes``: they run
    for each client, sequentially, before it joins a stack.
    """
    stacking = _stacking(module)
    loss = "masked_loss" if stacking is not None and stacking.draws is not None else "sample_losses"
    if not callable(getattr(module, loss, None)):
        return f"it has no {loss} method (the {_LOSSES[loss]})"
    if stacking is None:
        return f"its stacking() gives None: it declares no Stacking for its {loss}"
    mro = type(module).__mro__
    owner = next(cls for cls in mro if loss in cls.__dict__)
    hooks_run = stacking.client_attributes is not None
    for cls in mro[: mro.index(owner)]:
        hooks = [hook for hook in _LOSS_HOOKS[: 2 if hooks_run else None] if hook in cls.__dict__]
        if hooks:
            return f"{cls.__name__} overrides {', '.join(hooks)}, which the stacked path does not call"
    preparing = next((cls for cls in mro[: mro.index(owner) + 1] if "preparation_phases" in cls.__dict__), None)
    if preparing is not None and not hooks_run:
        return f"{preparing.__name__} defines preparation_phases and its stacking names no client_attributes"
    refusal = _layer_refusal(module) or stacking.refusal
    if refusal is not None:
        return refusal
    if module.client_statistics() and not hooks_run:
        return "it uploads client_statistics() and its stacking names no client_attributes"
    return next(filter(None, map(optimizer_refusal, local_optimizers(module))), None)


def _layer_refusal(module: EngineModule) -> str | None:
    """Why one of ``module``'s layers, in the mode it trains in, gives per-client results a stack cannot match."""
    for name, layer in module.named_modules():
        if isinstance(layer, _DropoutNd) and layer.p > 0 or isinstance(layer, nn.RReLU):
            return f"its layer '{name}' ({type(layer).__name__}) draws random numbers in training"
        if isinstance(layer, _NormBase) and layer.training:  # in inference mode it is an affine map of its buffers
            return f"its layer '{name}' ({type(layer).__name__}) normalises with batch statistics"
    return None


def check_stacking(fabric: Fabric, modules: Iterable[EngineModule]) -> None:
    """Refuse, before any training, a run whose clients cannot train in stacks (see :func:`stacking_refusal`).

    Args:
        fabric: the run's Fabric; its precision must be full (``"32-true"``): no autocast or loss scaling.
        modules: one built module per client architecture.

    Raises:
        ValueError: naming the module (or the precision) and the reason.

    """
    if type(fabric.strategy.precision) is not Precision:
        raise ValueError(
            "FederatedTrainer: field 'stack_clients' needs full precision ('32-true'), got"
            f" {type(fabric.strategy.precision).__name__}; leave 'stack_clients' unset for mixed precision"
        )
    for module in modules:
        reason = stacking_refusal(module)
        if reason is not None:
            raise ValueError(
                f"FederatedTrainer: field 'stack_clients' is set, but {type(module).__name__} cannot train clients"
                f" in stacks: {reason}; leave 'stack_clients' unset for it"
            )


class StackResult(NamedTuple):
    """What :func:`train_stack` gives back."""

    states: list[dict[str, Tensor]]
    """Each client's trained state (views of the stacked tensors)."""
    losses: dict[str, Tensor]
    """Every step's losses under its phase's ``loss_key`` (``"loss"`` always present), each ``(steps, K)``."""
    optimizer_states: list[dict[str, Any]] | None
    """With ``optimizer_states``, each client's optimizer state after training (as ``state_dict()`` gives it)."""
    inputs: list[dict[str, Tensor]]
    """Each client's ``inputs`` that an optimizer trained (e.g. FLIC's anchor copy), after training."""
    stacked: dict[str, Tensor]
    """The trained states stacked, ``(K, *shape)`` each: ``states[k][name]`` is ``stacked[name][k]``."""


def train_stack(
    module: EngineModule,
    states: Sequence[Mapping[str, Tensor]],
    batches: Sequence[Sequence[Sequence[Sequence[Tensor]]]],
    phases: Sequence[LocalPhase],
    inputs: Sequence[Mapping[str, Tensor]] = (),
    optimizer_states: Sequence[Mapping[str, Any] | None] | None = None,
) -> StackResult:
    """Train ``K`` clients of ``module``'s architecture at once through the local ``phases``.

    The local loop (:func:`~fedhet.plugins.clients.local_loop.run_phases`) runs a
    :class:`~fedhet.plugins.clients.local_step.StackedStep` on the clients' batches of each step: it stacks them
    (zero-padded to the longest, see :func:`~fedhet.functional.stack_padded`), computes every client's loss with
    ``torch.func.vmap`` over ``torch.func.functional_call`` of ``module.sample_losses`` (their masked mean) or
    ``module.masked_loss``, back-propagates their sum into the stacked tensors and steps the optimizers that the phase
    names, each built from ``module.configure_optimizers()`` (:func:`stacked_optimizer`). A phase trains the parameters
    that ``module.set_local_phase(phase)`` leaves trainable; an optimizer may also step some of the ``inputs`` (tensors
    the module holds as attributes, e.g. FLIC's anchor copy, which its ``configure_optimizers()`` makes).

    Args:
        module: a stackable module (:func:`stacking_refusal`); its own tensors are not used or changed.
        states: each client's full state (``state_dict`` names) before training.
        batches: ``batches[k][p]``: client ``k``'s batches of phase ``p``, each a sequence of tensors (e.g.
            ``(x, y)``) of ``B`` rows; in each phase every client has the same number of batches.
        phases: the local schedule.
        inputs: per client, tensors that replace the module's attributes of those names while its losses are computed
            (e.g. FedPAC's own centroids), each of one shape for every client; none by default.
        optimizer_states: for a module that keeps the state of its one optimizer between rounds, each client's kept
            state (``Optimizer.state_dict()``; ``None``: a new optimizer), stacked into the one optimizer; the clients
            must agree on the state's scalars (e.g. Adam's step count). ``None``: none kept.

    Returns:
        the trained states, the losses, the kept optimizer states and the trained inputs (:class:`StackResult`).

    Raises:
        ValueError: when a layer normalises with batch statistics in the mode the module is in (BatchNorm in
            training mode: a stack's statistics would mix its clients), when a phase names an optimizer that
            ``configure_optimizers()`` does not give, or with kept states of several optimizers.

    """
    refusal = _layer_refusal(module)
    if refusal is not None:
        raise ValueError(f"{type(module).__name__} cannot train in a stack: {refusal}")
    leaves = _stacked_leaves(module, states)
    attributes = tuple(inputs[0]) if inputs else ()
    with local_training(module, (), phases) as (_, built):  # built as the sequential path builds them
        pass
    stepped_ids = {id(p) for optimizer in built for group in optimizer.param_groups for p in group["params"]}
    trained = [name for name in attributes if id(getattr(module, name)) in stepped_ids]
    for name in attributes:
        leaves[name] = torch.stack([client[name].detach() for client in inputs]).requires_grad_(name in trained)
    optimizers = [stacked_optimizer(optimizer, module, leaves, attributes) for optimizer in built]
    kept_leaves: list[Tensor] = []
    if optimizer_states is not None:
        if len(built) != 1:
            raise ValueError("kept optimizer states of a module with several optimizers cannot be stacked")
        kept_leaves = [leaves[name] for name in optimizer_names(built[0], module)]
        load_stacked_state(optimizers[0], kept_leaves, optimizer_states)
    stacking = _stacking(module)
    penalised = isinstance(module, PenalisedModule) and module.has_local_penalty  # e.g. FedProx
    step = StackedStep(module, leaves, optimizers, stacking is not None and stacking.draws is not None, penalised)
    schedule = [(phase, zip(*(client[p] for client in batches), strict=True)) for p, phase in enumerate(phases)]
    losses = run_phases(module, step, schedule)  # each step: the clients' batches of that step
    stacked = {name: leaf.detach().contiguous() for name, leaf in leaves.items() if name not in attributes}
    result = unstack_states(stacked)
    trained_inputs = unstack_states({name: leaves[name].detach() for name in trained}) if trained else []
    kept = None
    if optimizer_states is not None:
        kept = unstacked_states(optimizers[0], built[0], kept_leaves, len(states))
    return StackResult(
        result,
        {key: torch.stack(values) if values else torch.zeros(0, len(states)) for key, values in losses.items()},
        kept,
        trained_inputs or [{} for _ in states],
        stacked,
    )


def _stacked_leaves(module: nn.Module | EngineModule, states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """The clients' ``states`` stacked, the weights of ``module``'s linear layers stored by columns.

    That is the layout in which their gradient comes under ``vmap`` (:func:`~fedhet.functional.stack_states`).
    """
    linear = [
        f"{prefix}.weight" if prefix else "weight"
        for prefix, layer in module.named_modules()
        if isinstance(layer, nn.Linear)
    ]
    return stack_states(states, by_columns=linear)


# --------------------------------------------------------------------------------------------- the engine's side
@dataclass
class _Ready:
    """A started client with its state and batches drawn: ready to join a stack."""

    job: ClientJob
    state: dict[str, Tensor]
    phases: list[LocalPhase]
    batches: list[list[Any]]
    loader: Iterable[Any]
    attributes: dict[str, Any] | None
    """What the module's ``on_train_start`` set (its stacking's ``client_attributes``); ``None``: hooks not run."""
    prepared: dict[str, float]
    """The metrics of the client's preparation phases (its logs, phase losses and steps), run before it joined."""
    optimizer: dict[str, Any] | None = None
    """The optimizer state the client kept from its last round (modules with ``keep_optimizer_state``)."""
    generators: list[Tensor] | None = None
    """torch's generator states once the client's batches and their draws were taken: where its ``on_train_end`` goes
    on drawing, as on the sequential path (``None``: its hooks are not run)."""


class StackedRunner(LocalRunner):
    """Trains a round's clients in stacks of up to ``size`` with :func:`train_stack` (``StackedRunner(size)``).

    A started client (its module holding its state) gives its state and its batches, drawn from its own
    ``train_dataloader()`` under the seed of the sequential path, and joins the open stack of its architecture, phases
    and steps per phase; a full stack trains at once, the others when the round's clients are all submitted. Then each
    client of the stack is finished as in the sequential path
    (:meth:`~fedhet.plugins.clients.context.ClientContext.finish`). A stack whose training raises fails all its clients.

    Args:
        size: the most clients in one stack.

    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._stacks: dict[Hashable, list[_Ready]] = {}

    def check(self, context: ClientContext) -> None:
        """Refuse a run whose clients cannot train in stacks (:func:`check_stacking`, one module per architecture)."""
        check_stacking(context.fabric, [context.slot(cid).module for cid in context.architectures()])

    def submit(self, context: ClientContext, job: ClientJob, uploads: RoundUploads) -> None:
        """Draw the client's batches and add it to its stack; train the stack when it is full."""
        module = job.slot.module
        phases = module.local_phases()
        stacking = _stacking(module)
        names = stacking.client_attributes if stacking is not None else None
        devices = [context.fabric.device]
        with seeded(context.fit_seed(job.client_id, job.round_idx), devices):
            loader = context.client_data(job.client_id).train_dataloader()
            attributes, prepared = context.prepare(job, loader, names) if names is not None else (None, {})
            draws = stacking.draws if stacking is not None else None
            batches = _schedule_batches(context, loader, phases, draws)
            generators = generator_states(devices) if names is not None else None
        state = {name: tensor.detach().clone() for name, tensor in job.slot.tensors().items()}
        kept = context.store[job.client_id].optimizer if module.keep_optimizer_state else None
        if isinstance(kept, list):
            raise TypeError("a module that keeps the state of several optimizers cannot train in stacks")
        key = (context.signatures[job.client_id], tuple(phases), tuple(map(len, batches)), scalar_state(kept))
        stack = self._stacks.setdefault(key, [])
        stack.append(_Ready(job, state, phases, batches, loader, attributes, prepared, kept, generators))
        if len(stack) == self.size:
            self._train(context, self._stacks.pop(key), uploads)

    def flush(self, context: ClientContext, uploads: RoundUploads) -> None:
        """Train the stacks that are not full."""
        stacks, self._stacks = self._stacks, {}
        for stack in stacks.values():
            self._train(context, stack, uploads)

    @staticmethod
    def _train(context: ClientContext, stack: list[_Ready], uploads: RoundUploads) -> None:
        slot = stack[0].job.slot
        try:
            states, batches = [c.state for c in stack], [c.batches for c in stack]
            inputs = [{k: v for k, v in (c.attributes or {}).items() if isinstance(v, Tensor)} for c in stack]
            kept = [c.optimizer for c in stack] if slot.module.keep_optimizer_state else None
            trained, losses, optimizers, trained_inputs, stacked = train_stack(
                slot.module, states, batches, stack[0].phases, inputs if inputs[0] else (), kept
            )
        except Exception as err:  # e.g. a module whose sample_losses cannot run under vmap: its clients fail, named
            for client in stack:
                context.fail(client.job.client_id, err, uploads)
            return
        # Each client's shared upload is its slice of the stack's shared tensors, moved to the CPU once for the stack
        # (unless its on_train_end runs: it may change them), so the upload checks' shared part runs once for the
        # stack, not once per client, and the uploads need no copy each (nothing else holds or changes the stack).
        hooks_run = stack[0].attributes is not None
        shared = {name: stacked[name] for name in slot.shared}
        shared_checked = not hooks_run and context.shared_checked(stack[0].job.client_id, shared)
        if shared and not hooks_run:  # on a CPU, .cpu() gives the tensor itself
            uploaded = unstack_states({name: tensor.cpu() for name, tensor in shared.items()})
            trained = [{**tensors, **upload} for tensors, upload in zip(trained, uploaded, strict=True)]
        steps = float(sum(len(values) for values in losses.values()))
        means = {
            key: values.double().mean(0).tolist() if len(values) else [0.0] * len(stack)
            for key, values in losses.items()
        }
        kept_after = optimizers if optimizers is not None else [None] * len(stack)
        for k, (client, tensors, optimizer, after) in enumerate(
            zip(stack, trained, kept_after, trained_inputs, strict=True)
        ):
            if optimizer is not None:
                optimizer = move_data_to_device(optimizer, "cpu")
            metrics = {**client.prepared, **{key: mean[k] for key, mean in means.items()}}
            metrics["steps"] = client.prepared.get("steps", 0.0) + steps
            result = LocalResult(tensors, metrics, optimizer=optimizer, in_module=False, shared_owned=not hooks_run)
            try:
                if client.attributes is not None:
                    attributes = {**client.attributes, **after}
                    result = context.end_training(client.job, client.loader, result, attributes, client.generators)
                context.finish(client.job, result, uploads, shared_checked)
            except Exception as err:  # as in the sequential path, the hook's failure is its client's
                context.fail(client.job.client_id, err, uploads)


def _stacking(module: EngineModule) -> Stacking | None:
    """The module's ``stacking()`` (``None``: it declares none, or has no such hook).

    Called, not checked through the :class:`~fedhet.core.StackableModule` protocol's ``isinstance`` (~7 µs, once per
    client of every stack): ``check_stacking`` has checked the module before any training.
    """
    hook = getattr(module, "stacking", None)
    return cast(Stacking | None, hook()) if callable(hook) else None


def _schedule_batches(
    context: ClientContext,
    loader: Iterable[Any],
    phases: Sequence[LocalPhase],
    draws: Callable[[Any, str | None], Any] | None,
) -> list[list[Any]]:
    """A client's batches of each local phase (:meth:`ClientContext.schedule`), on the device.

    A :class:`~fedhet.core.BatchLossModule` completes each with its step's random draws (its stacking's ``draws``)
    right after the batch is drawn: the numbers its ``training_step`` draws on the sequential path, from the same
    stream (nothing else in a stacked step draws).
    """
    schedule = context.schedule(loader, phases)
    if draws is None:
        return [list(batches) for _, batches in schedule]
    return [[draws(batch, phase.name) for batch in batches] for phase, batches in schedule]
