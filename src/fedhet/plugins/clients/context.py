"""ClientContext: what a client runner (and an adapter such as Flower's ClientApp) may use of a federation.

The trainer builds one context per ``fit``/``validate``/``test`` from the module and the federated datamodule. It owns
the per-client plumbing that the sequential and stacked runners share: one module per client architecture
(:class:`~fedhet.plugins.clients.slots.ModuleSlot`), loading a client's personal state and the server's payload into it,
the seeds of a client's draws, the two client hooks, turning trained tensors into a :class:`~fedhet.core.ClientUpdate`,
and admitting or rejecting that upload with the run's upload checks. A runner never touches the trainer itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast

from lightning.fabric import Fabric
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor

from fedhet.core import (
    ClientData,
    ClientFailure,
    ClientSpec,
    ClientState,
    ClientUpdate,
    EngineModule,
    ExpectedUpload,
    FederatedData,
    LocalPhase,
    LocalTraining,
    RoundUploads,
    ServerState,
    TensorSpec,
    non_finite,
    num_bytes,
    to_cpu,
)
from fedhet.core.seeding import derive_seed, rng_preserved, seeded, set_generator_states
from fedhet.plugins.clients.local_loop import (
    evaluate_client,
    local_metrics,
    local_schedule,
    run_local_training,
    run_phases,
    started_client,
)
from fedhet.plugins.clients.meta_build import client_module
from fedhet.plugins.clients.slots import ModuleSlot
from fedhet.plugins.hooks.dispatch import CallbackHooks
from fedhet.plugins.storage.client_store import ClientStore
from fedhet.plugins.storage.fingerprint import run_fingerprint
from fedhet.plugins.uploads.policies import DeclaredUpload, FiniteUpload, UploadCheck


def check_federated_datamodule(datamodule: object) -> None:
    """Refuse, naming the missing member, a datamodule that is not a federation (:class:`~fedhet.core.FederatedData`).

    Raises:
        TypeError: ``FederatedTrainer needs a FederatedDataModule; <class> has no '<member>'``.

    """
    for attr in ("setup", "client_ids", "client", "specs"):
        if not hasattr(datamodule, attr):
            name = type(datamodule).__name__
            raise TypeError(f"FederatedTrainer needs a FederatedDataModule; {name} has no '{attr}'")


@dataclass
class ClientJob:
    """A client of a round loaded into its architecture's module and announced to ``on_client_fit_start``.

    Args:
        client_id: the client's name.
        round_idx: the round.
        slot: the module serving the client's architecture, holding the client's state and the server's payload.
        bytes_down: bytes of the payload and statistics the client received.
        started: ``time.perf_counter()`` when its loading began (for the time budget).

    """

    client_id: str
    round_idx: int
    slot: ModuleSlot
    bytes_down: int
    started: float


@dataclass
class LocalResult:
    """What a runner's local training of one client gives back to the context.

    Args:
        tensors: the client's whole trained state, by ``state_dict`` name (on the sequential path the module's own
            tensors, which :meth:`ClientContext.finish` copies).
        metrics: ``{"loss": mean training loss, "steps": optimizer steps}``.
        statistics: the statistics the client uploads (``client_statistics()`` after training).
        optimizer: the optimizer state to keep for its next round (methods with ``keep_optimizer_state``).
        in_module: whether the job's module already holds ``tensors`` (the sequential path); otherwise the context
            loads them before a callback's ``on_client_fit_end`` looks at the module.
        shared_owned: whether the shared tensors among ``tensors`` are CPU tensors that nothing else holds or changes
            (a stack's slices, made for the uploads): the upload takes them as they are instead of copying them.

    """

    tensors: dict[str, Tensor]
    metrics: dict[str, float]
    statistics: dict[str, Tensor] = field(default_factory=dict)
    optimizer: dict[str, Any] | list[dict[str, Any]] | None = None
    in_module: bool = True
    shared_owned: bool = False


class ClientEvaluation(NamedTuple):
    """One client's evaluation: its metrics, its number of samples, and whether each metric is better higher."""

    metrics: dict[str, float]
    num_samples: int
    higher_is_better: dict[str, bool]


class ClientContext:
    """What a :class:`~fedhet.plugins.ClientRunner` may use of the federation: data, modules, store, hooks.

    Args:
        fabric: the run's Fabric (device, precision, rank).
        template: the run's module; each client architecture gets a deep copy built for it.
        datamodule: the federated datamodule (``client_ids``, ``client(cid)``, ``specs``), already set up.
        seed: the run's seed; every draw of a client derives from (seed, purpose, round, client).
        local_epochs: the trainer's ``local_epochs``.
        local_steps: the trainer's ``local_steps``.
        hooks: the run's callback dispatch.
        checks: the upload checks an upload must pass to be admitted (non-finite, time budget...), after the check
            against what the server expects of the client (:class:`~fedhet.plugins.uploads.policies.DeclaredUpload`).
        server_state: returns the server state clients load from (the trainer may replace it on resume).
        store: returns the client state store (the trainer may replace it on resume).
        personal_init: ``"shared"``: a client's personal layers start from its architecture's one draw (the one that
            also initialises the shared layers), and a personal tensor whose name, shape and dtype the first
            architecture's has too starts as that one (one template head for clients whose inputs differ);
            ``"per_architecture"``: from its architecture's draw alone; ``"per_client"``: from a draw of its own,
            seeded by (seed, client).
        check_metric_names: the declaration check also refuses training metrics the method does not log (uploads
            that arrive from other machines).

    """

    def __init__(
        self,
        fabric: Fabric,
        template: EngineModule,
        datamodule: FederatedData,
        seed: int,
        local_epochs: int,
        local_steps: int | None,
        hooks: CallbackHooks,
        checks: Sequence[UploadCheck],
        server_state: Callable[[], ServerState],
        store: Callable[[], ClientStore],
        personal_init: Literal["shared", "per_architecture", "per_client"] = "shared",
        check_metric_names: bool = False,
    ) -> None:
        self.fabric = fabric
        self.template = template
        self.seed = seed
        self.local_epochs = local_epochs
        self.local_steps = local_steps
        self.hooks = hooks
        self.checks: list[UploadCheck] = [DeclaredUpload(self.expected_upload, check_metric_names), *checks]
        self.personal_init = personal_init
        self._server_state = server_state
        self._store = store
        self.client_ids: list[str] = list(datamodule.client_ids)
        self.specs: Mapping[str, ClientSpec] = datamodule.specs
        self._data = {cid: datamodule.client(cid) for cid in self.client_ids}
        self.signatures: dict[str, Hashable] = {cid: template.client_signature(s) for cid, s in self.specs.items()}
        self._slots: dict[Hashable, ModuleSlot] = {}
        self._fingerprint: dict[str, Any] | None = None
        self._expected: dict[str, ExpectedUpload] = {}
        self._template: dict[str, Tensor] | None = None

    # ------------------------------------------------------------------ what a client has
    @property
    def server_state(self) -> ServerState:
        """The server state clients load from."""
        return self._server_state()

    @property
    def store(self) -> ClientStore:
        """The client state store of this process."""
        return self._store()

    def client_data(self, client_id: str) -> ClientData:
        """The client's data (its ``ClientDataModule``)."""
        return self._data[client_id]

    def fit_seed(self, client_id: str, round_idx: int) -> int:
        """The seed of the client's local training draws in ``round_idx`` (shuffling, dropout)."""
        return derive_seed(self.seed, "fit", round_idx, client_id)

    def build(self, client_id: str, seed: int) -> EngineModule:
        """A fresh module for ``client_id``, its layers created under ``seed``."""
        with seeded(seed, [self.fabric.device]):
            module = client_module(self.template, self.specs[client_id])
        module.to(self.fabric.device)
        return module

    def slot(self, client_id: str) -> ModuleSlot:
        """The module that serves every client with ``client_id``'s architecture (built on first use)."""
        signature = self.signatures[client_id]
        slot = self._slots.get(signature)
        if slot is None:
            slot = self._slots[signature] = ModuleSlot(self.build(client_id, derive_seed(self.seed, "server")))
        return slot

    def init_seed(self, client_id: str) -> int:
        """The seed of ``client_id``'s initial personal layers: the architecture's shared draw, or the client's own."""
        if self.personal_init == "per_client":
            return derive_seed(self.seed, "init", client_id)
        return derive_seed(self.seed, "server")  # the draw that built the slot, so the initial model is one model

    def initial_personal(self, client_id: str) -> dict[str, Tensor]:
        """``client_id``'s personal tensors before its first round, on the CPU (see ``personal_init``).

        With ``"shared"``, a personal tensor that the first architecture's build holds with the same name, shape and
        dtype is that build's: clients whose input layers differ in size still start from one head, as the reference
        implementations' single template model does.
        """
        slot = self.slot(client_id)
        if not slot.personal:
            return {}
        state = self.build(client_id, self.init_seed(client_id)).state_dict()
        personal = {name: state[name] for name in slot.personal}
        if self.personal_init == "shared":
            template = self._template_personal()
            for name, value in personal.items():
                first = template.get(name)
                if first is not None and first.shape == value.shape and first.dtype == value.dtype:
                    personal[name] = first
        return to_cpu(personal)

    def _template_personal(self) -> dict[str, Tensor]:
        """The first architecture's initial personal tensors (computed once per context)."""
        if self._template is None:
            first = self.architectures()[0]
            state = self.build(first, self.init_seed(first)).state_dict()
            self._template = to_cpu({name: state[name] for name in self.slot(first).personal})
        return self._template

    def architectures(self) -> list[str]:
        """One client id per client architecture, in client order."""
        first: dict[Hashable, str] = {}
        for cid in self.client_ids:
            first.setdefault(self.signatures[cid], cid)
        return list(first.values())

    def initial_shared(self) -> dict[str, Tensor]:
        """The server's first shared parameters: those of one build per client architecture, on the CPU.

        Raises:
            ValueError: naming the client and the parameter when two architectures give one name different shapes.

        """
        shared: dict[str, Tensor] = {}
        for cid in self.architectures():
            for name, value in self.slot(cid).module.shared_state_dict().items():
                if name in shared and shared[name].shape != value.shape:
                    raise ValueError(
                        f"client '{cid}': shared parameter '{name}' has shape {tuple(value.shape)}, but other clients"
                        f" give it shape {tuple(shared[name].shape)}; shared parameters must agree in shape"
                    )
                shared.setdefault(name, value.detach().cpu().clone())
        return shared

    def expected_upload(self, client_id: str) -> ExpectedUpload:
        """What the server admits from ``client_id`` (computed once per client from its architecture's module).

        Raises:
            KeyError: the federation holds no such client.

        """
        expected = self._expected.get(client_id)
        if expected is None:
            spec = self.specs[client_id]
            slot = self.slot(client_id)
            state = slot.module.state_dict()
            shared = {name: TensorSpec.of(state[name]) for name in slot.shared}
            declaration = slot.module.upload_declaration(spec)
            expected = self._expected[client_id] = ExpectedUpload(shared, declaration, spec.num_train)
        return expected

    def load(self, client_id: str) -> tuple[ModuleSlot, int]:
        """The slot of ``client_id`` with its personal state and the server's payload loaded; bytes sent down.

        A client seen for the first time gets personal layers initialised from :meth:`init_seed`.
        """
        slot = self.slot(client_id)
        slot.module.setup_client(self.specs[client_id])
        store = self.store
        if client_id not in store:
            store[client_id] = ClientState(self.initial_personal(client_id))
        server = self.server_state
        payload = server.payload_for(client_id, slot.shared)
        slot.load(store[client_id].personal, payload)
        statistics = server.statistics
        if statistics:
            slot.module.receive_statistics(move_data_to_device(statistics, self.fabric.device))
        return slot, num_bytes(payload) + num_bytes(statistics)

    def trained_module(self, client_id: str) -> EngineModule:
        """A new module for ``client_id`` holding what it evaluates (on the run's device).

        That is its personal state, the server's payload for it and the broadcast statistics.
        """
        slot, _ = self.load(client_id)
        module = self.build(client_id, self.init_seed(client_id))
        module.load_state_dict(slot.module.state_dict())
        if self.server_state.statistics:
            module.receive_statistics(self.server_state.statistics)
        return module

    def fingerprint(self, callbacks: Sequence[Any]) -> dict[str, Any]:
        """What this run is (:func:`~fedhet.plugins.storage.fingerprint.run_fingerprint`), computed once per context."""
        if self._fingerprint is None:
            self._fingerprint = run_fingerprint(self.template, self._data, self.specs, callbacks)
        return self._fingerprint

    # ------------------------------------------------------------------ one client's fit
    def start(self, client_id: str, round_idx: int) -> ClientJob:
        """Load the client and fire ``on_client_fit_start`` with its module."""
        started = time.perf_counter()
        slot, bytes_down = self.load(client_id)
        self.hooks("on_client_fit_start", round_idx=round_idx, client_id=client_id, module=slot.module)
        return ClientJob(client_id, round_idx, slot, bytes_down, started)

    def train(self, job: ClientJob) -> LocalResult:
        """Train the job's module on its client's data through its preparation and local phases (``training_step``)."""
        module = job.slot.module
        keep_optimizer = module.keep_optimizer_state
        previous = self.store[job.client_id].optimizer if keep_optimizer else None
        with seeded(self.fit_seed(job.client_id, job.round_idx), [self.fabric.device]):
            metrics, optimizer = run_local_training(
                self.fabric,
                module,
                self._data[job.client_id].train_dataloader(),
                module.preparation_phases() + module.local_phases(),
                self.local_epochs,
                self.local_steps,
                previous,
                keep_optimizer,
                job.slot.optimizers,
            )
        optimizer = move_data_to_device(optimizer, "cpu") if optimizer is not None else None
        return LocalResult(job.slot.tensors(), metrics, to_cpu(module.client_statistics()), optimizer)

    def schedule(
        self, loader: Iterable[Any], phases: Sequence[LocalPhase]
    ) -> Iterator[tuple[LocalPhase, Iterable[Any]]]:
        """The client's local schedule over ``phases`` with the trainer's epochs and steps (:func:`local_schedule`)."""
        return local_schedule(self.fabric, loader, phases, self.local_epochs, self.local_steps)

    def prepare(
        self, job: ClientJob, loader: Iterable[Any], names: Sequence[str]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """The first half of :meth:`train` for a client whose local phases run elsewhere (in a stack).

        Under the client's seeded draws (the caller's), the job's module is started as :meth:`train` starts it
        (:func:`~fedhet.plugins.clients.local_loop.started_client`: its ``LocalTraining``, its optimizers built, which
        may make per-client tensors such as FLIC's anchor copy, ``on_train_start``), then its
        ``preparation_phases()`` (FLIC's pre-training or re-alignment) run with its own step.

        Returns:
            the module's attributes ``names`` as they then are, and the metrics of the preparation phases.

        """
        module = job.slot.module
        preparation = module.preparation_phases()
        phases = preparation + module.local_phases()
        with started_client(self.fabric, module, loader, phases, job.slot.optimizers) as (training, step):
            losses = run_phases(module, step, self.schedule(loader, preparation))
        metrics = local_metrics(training.logs, losses, self.fabric.device.type != "cpu")
        del metrics["loss"]  # no local phase ran yet: the stack's steps give the loss
        return {name: getattr(module, name) for name in names}, metrics

    def end_training(
        self,
        job: ClientJob,
        loader: Iterable[Any],
        result: LocalResult,
        attributes: Mapping[str, Any],
        generators: list[Tensor] | None,
    ) -> LocalResult:
        """The second half of :meth:`train` for a client trained elsewhere: its ``on_train_end`` and its statistics.

        The trained tensors and ``attributes`` are loaded into the job's module, which gets a ``LocalTraining`` of
        ``loader`` back; ``on_train_end`` draws from ``generators`` (torch's states once the client's batches and
        their draws were taken), so it draws the numbers it draws in :meth:`train`: a statistics pass over its batches
        in the same order, FLIC's anchor samples of ``anchor_update="paper"``.

        Returns:
            the result with the module's tensors after ``on_train_end`` (which may change them, e.g. HyFEM's round
            count) and the client's statistics.

        """
        module = job.slot.module
        job.slot.load(result.tensors, {})
        for name, value in attributes.items():
            setattr(module, name, value)
        module.set_local_training(LocalTraining(loader))
        devices = [self.fabric.device]
        try:
            with rng_preserved(devices):
                if generators is not None:
                    set_generator_states(generators, devices)
                module.on_train_end()
            statistics = to_cpu(module.client_statistics())
        finally:
            module.set_local_training(None)
        return LocalResult(job.slot.tensors(), result.metrics, statistics, result.optimizer, in_module=True)

    def shared_checked(self, client_id: str, stacked: Mapping[str, Tensor]) -> bool:
        """Whether a stack's shared parameters pass, for every client of the stack, the upload checks' shared part.

        That is the names, shapes and dtypes :class:`~fedhet.plugins.uploads.policies.DeclaredUpload` expects and the
        finiteness :class:`~fedhet.plugins.uploads.policies.FiniteUpload` asks, checked once on the stacked tensors
        (one shape read and one reduction per name instead of ``K``). The stacked tensors were made in this process
        and each client's shared upload is its slice (on the CPU; :meth:`finish`), so a stack that passes holds only
        uploads that pass; one that does not (a non-finite value, a sum that overflows) is checked client by client.

        Args:
            client_id: a client of the stack (they share one architecture, hence one expected upload's shared part).
            stacked: the stack's shared parameters, ``(K, *shape)`` each.

        """
        return self.expected_upload(client_id).stack_mismatch(stacked) is None and not non_finite(stacked)

    def finish(self, job: ClientJob, result: LocalResult, uploads: RoundUploads, shared_checked: bool = False) -> None:
        """Build the client's upload, fire ``on_client_fit_end``, then admit it (:meth:`admit`).

        ``shared_checked``: :meth:`shared_checked` passed for the stack whose slices are ``result``'s shared tensors;
        ignored where a callback's ``on_client_fit_end`` may change the upload.

        Raises:
            Exception: whatever ``on_client_fit_end`` raises (the runner records it as the client's failure).

        """
        slot = job.slot
        shared = {name: result.tensors[name] for name in slot.shared}
        personal = {name: result.tensors[name] for name in slot.personal}
        update = ClientUpdate(
            client_id=job.client_id,
            num_samples=self.specs[job.client_id].num_train,
            shared=shared if result.shared_owned else to_cpu(shared),
            statistics=result.statistics,
            metrics=result.metrics,
        )
        if self.hooks.defines("on_client_fit_end"):
            if not result.in_module:
                slot.load(personal, shared)
            self.hooks(
                "on_client_fit_end", round_idx=job.round_idx, client_id=job.client_id, module=slot.module, update=update
            )
            shared_checked = False  # the callback may have changed the upload
        state = ClientState(to_cpu(personal), result.optimizer)
        self.admit(update, state, job.bytes_down, time.perf_counter() - job.started, uploads, shared_checked)

    def admit(
        self,
        update: ClientUpdate,
        state: ClientState,
        bytes_down: int,
        seconds: float,
        uploads: RoundUploads,
        shared_checked: bool = False,
    ) -> None:
        """Keep a trained client's state and upload, or record the first upload check that rejects it.

        ``shared_checked``: the shared parameters passed :meth:`shared_checked` with their stack; the checks of ours
        leave them out then (a user's check sees the whole upload).
        """
        for check in self.checks:
            if shared_checked and isinstance(check, DeclaredUpload | FiniteUpload):
                failure = check.reject(update, seconds, shared_checked=True)
            else:
                failure = check.reject(update, seconds)
            if failure is not None:
                uploads.failures.append(failure)
                return
        self.store[update.client_id] = state
        uploads.updates.append(update)
        uploads.bytes_down += bytes_down

    def fail(self, client_id: str, err: Exception, uploads: RoundUploads) -> None:
        """Record a client whose loading, training or hook raised, and re-read its module's tensors."""
        uploads.failures.append(ClientFailure.from_error(client_id, err))
        self.slot(client_id).refresh()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, client_id: str, stage: str, round_idx: int) -> ClientEvaluation | None:
        """One client's metrics on its ``stage`` split (``None``: it has no such split).

        A module with ``adaptation_phases()`` (e.g. FedAvg-FT) first fine-tunes a copy; the client's next load
        restores its real state.
        """
        client = self._data[client_id]
        loader = client.val_dataloader() if stage == "val" else client.test_dataloader()
        if not loader:
            return None
        slot, _ = self.load(client_id)
        module = slot.module
        adaptation = module.adaptation_phases()
        if adaptation:
            with seeded(derive_seed(self.seed, "adapt", round_idx, client_id), [self.fabric.device]):
                run_local_training(
                    self.fabric,
                    module,
                    client.train_dataloader(),
                    adaptation,
                    self.local_epochs,
                    self.local_steps,
                    optimizers=slot.optimizers,
                )
            slot.refresh()
        values = evaluate_client(self.fabric, module, loader, stage)
        directions = {name: bool(m.higher_is_better) for name, m in module.evaluation_metrics(stage).items()}
        return ClientEvaluation(values, len(cast(Any, loader).dataset), directions)
