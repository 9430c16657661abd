"""FederatedTrainer: the Fabric-driven round loop that every fedhet method runs on."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from lightning.fabric import Fabric
from lightning.fabric.loggers.logger import Logger
from lightning.pytorch import Callback, LightningModule

from fedhet.core import FederatedData, RoundUploads, ServerState
from fedhet.plugins.clients.context import ClientContext
from fedhet.plugins.clients.runners import ClientRunner
from fedhet.plugins.hooks.callback_setup import TrainerLogger, federation_callbacks, user_loggers
from fedhet.plugins.hooks.dispatch import CallbackHooks
from fedhet.plugins.rounds.comm import CommTotals
from fedhet.plugins.rounds.engine import RoundEngine, new_client_store, set_up_engine
from fedhet.plugins.rounds.launch import check_engine_module, hold_run, start_fabric
from fedhet.plugins.rounds.options import Checkpointing, ClientStates, Faults, Processes, Reporting, check_run_length
from fedhet.plugins.rounds.policy_setup import resolve_policies
from fedhet.plugins.rounds.run_files import RunFiles
from fedhet.plugins.rounds.sampling import ClientSampler, FullParticipation
from fedhet.plugins.storage.checkpoint import FederationCheckpoint, check_resumed_rounds, load_checkpoint
from fedhet.plugins.storage.client_store import ClientStore
from fedhet.plugins.storage.export import save_lightning_checkpoint
from fedhet.plugins.storage.files import file_identity
from fedhet.plugins.storage.run_folder import RunFolder, version_of
from fedhet.plugins.uploads.aggregators import Aggregator
from fedhet.plugins.uploads.policies import FailureBudget, ServerUpdate, UploadCheck
from fedhet.plugins.uploads.privacy import UploadPrivacy

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _releases_run_folder(command: _Command) -> _Command:
    """A trainer command that releases the run's version folder when it ends, however it ends."""

    @functools.wraps(command)
    def run_command(self: FederatedTrainer, *args: Any, **kwargs: Any) -> Any:
        try:
            return command(self, *args, **kwargs)
        finally:
            self.run.release()

    return cast(_Command, run_command)


class FederatedTrainer:
    """Runs federated rounds over the clients of a federated datamodule, with one Fabric.

    Each round: sample clients; for each sampled client restore its personal state, load the server's shared
    parameters and statistics, run the module's local schedule through its own ``training_step``, collect its upload;
    aggregate the uploads by parameter name; run the server-side callbacks; evaluate; log; checkpoint. With
    ``devices=N`` the sampled clients are spread over N processes (no gradient synchronisation between clients) and
    the uploads are gathered and aggregated in client order on every process, so results do not depend on N.

    Callbacks receive the hooks of :class:`~fedhet.core.FederationHooks`, in the order it documents, each with only
    the keyword arguments it names (as with ``Fabric.call``); each client's pair fires inside the round's training, in
    client order, as the client runner documents (:mod:`fedhet.plugins.clients.runners`).

    The trainer runs the commands (``fit``, ``validate``, ``test``, ``export``) and composes their parts: the launch
    of its processes and the hold of the run's folder (:mod:`fedhet.plugins.rounds.launch`); each command's
    :class:`~fedhet.plugins.rounds.engine.RoundEngine` (its clients and their owners, a round, evaluation,
    checkpoints); what the command reads and writes in its version folder
    (:class:`~fedhet.plugins.rounds.run_files.RunFiles`: the resumed checkpoint, the config, the run record); its
    policy objects (:mod:`fedhet.plugins.rounds.policy_setup`: a client runner, upload checks, a failure budget, a
    server update); its callbacks (:mod:`~fedhet.plugins.hooks.callback_setup`). Its other options come in groups
    (:mod:`fedhet.plugins.rounds.options`).

    Args:
        rounds: communication rounds.
        local_epochs: local epochs per round (of each local phase that does not set its own length).
        local_steps: if set, local optimizer steps per round instead of epochs.
        seed: every random draw of the run (client initialisation, sampling, shuffling, dropout, privacy noise)
            derives from it.
        sampler: which clients take part in a round; every client by default.
        default_root_dir: the folder of the runs: each run (``fit`` from scratch, ``validate``, ``test``) writes its
            config, CSV logs, checkpoints, spilled client states and plots into its own new ``version_N`` folder
            there (:mod:`fedhet.plugins.storage.run_folder`); a resumed ``fit`` goes on in its checkpoint's folder and
            ``export`` writes beside the run it exports. A command holds its folder under a lock until it ends: a
            second command on a held folder is refused, naming the holder.
        logger: a Lightning/Fabric logger or a list of them, logged to beside the run folder's own ``metrics.csv``
            (the run's record, which ``fedhet compare`` and a resumed fit read); ``True`` for that CSV record alone,
            ``False`` for no logger at all. A short class name (``TensorBoardLogger``, ``CSVLogger``,
            ``WandbLogger``) is Lightning's logger of that name.
        callbacks: federation callbacks (merged with the module's ``configure_callbacks()``); Lightning's
            ``ModelCheckpoint`` and ``EarlyStopping`` act at round granularity
            (:mod:`fedhet.callbacks.lightning_adapters`), any other Lightning callback is refused.
        upload_checks: checks of the user's (:class:`~fedhet.plugins.UploadCheck`) that every upload passes
            to join the round's aggregate, after the trainer's own: the client's declaration
            (:class:`~fedhet.plugins.uploads.policies.DeclaredUpload`) and finite values
            (:class:`~fedhet.plugins.FiniteUpload`).
        server_update: how the admitted uploads become new shared parameters
            (:class:`~fedhet.plugins.ServerUpdate`): an
            :class:`~fedhet.plugins.Aggregator` (folded plainly, e.g. ``CoordinateMedian``), an
            :class:`~fedhet.plugins.UploadPrivacy` (client-level differential privacy: clipped updates,
            Gaussian noise on the uniform mean of the shared parameters and on the chosen statistics,
            ``privacy/epsilon`` logged every round), or a policy object. ``None``: the module's
            ``configure_aggregator()`` (a weighted mean by default).
        runner: how this process's clients train (:class:`~fedhet.plugins.ClientRunner`): one at a time
            (``SequentialRunner``, the default), or in stacks with ``torch.func``
            (:class:`~fedhet.plugins.StackedRunner`: much less Python time per client for small models, the
            same results up to floating-point summation order; ``fit`` refuses a module or an optimizer it cannot
            stack, naming the reason).
        processes: accelerator, devices, nodes, how processes start, precision, stacking
            (:class:`~fedhet.plugins.Processes`).
        checkpointing: when the federation is saved (:class:`~fedhet.plugins.Checkpointing`).
        faults: how many failing clients a round survives, and the stragglers' time budget
            (:class:`~fedhet.plugins.Faults`).
        client_state: how personal layers start and how much client state stays in memory
            (:class:`~fedhet.plugins.ClientStates`).
        reporting: how often clients are evaluated, per-client metrics, the progress display
            (:class:`~fedhet.plugins.Reporting`).

    """

    def __init__(
        self,
        rounds: int = 10,
        local_epochs: int = 1,
        local_steps: int | None = None,
        seed: int = 0,
        sampler: ClientSampler | None = None,
        default_root_dir: str = "fedhet_runs",
        logger: TrainerLogger | Iterable[TrainerLogger] | bool = True,
        callbacks: list[Callback] | None = None,
        upload_checks: list[UploadCheck] | None = None,
        server_update: Aggregator | UploadPrivacy | ServerUpdate | None = None,
        runner: ClientRunner | None = None,
        processes: Processes = Processes(),
        checkpointing: Checkpointing = Checkpointing(),
        faults: Faults = Faults(),
        client_state: ClientStates = ClientStates(),
        reporting: Reporting = Reporting(),
    ) -> None:
        check_run_length(rounds, local_epochs, local_steps)
        policies = resolve_policies(upload_checks, server_update, runner, processes, faults, seed)
        self.rounds = rounds
        self.local_epochs = local_epochs
        self.local_steps = local_steps
        self.seed = seed
        self.sampler = sampler or FullParticipation()
        self.default_root_dir = Path(default_root_dir)
        self.run = RunFolder(self.default_root_dir)
        self.upload_checks = policies.upload_checks
        self.server_update = policies.server_update
        self.runner = policies.runner
        self.processes = processes
        self.checkpointing = checkpointing
        self.faults = faults
        self.client_state = client_state
        self.reporting = reporting
        self._failure_budget = FailureBudget(faults.max_client_failures)
        self._files = RunFiles(self.run, record=logger is not False)
        self.loggers: list[Logger] = user_loggers(logger)
        self.user_callbacks: list[Any] = list(callbacks or [])
        self.run_config: dict[str, Any] | None = None  # set by the CLI, saved beside the logs
        self.fabric: Fabric | None = None
        self.server_state = ServerState()
        self.history: list[dict[str, float]] = []
        self.current_round = 0
        self._store = ClientStore()
        self._round_engine: RoundEngine | None = None
        self.comm = CommTotals()
        self._has_state = False
        self.fitting = False
        self.should_stop = False  # a callback sets it in on_round_end to end fit after that round

    # ------------------------------------------------------------------ public entry points
    @_releases_run_folder
    def fit(self, model: LightningModule, datamodule: FederatedData, ckpt_path: str | None = None) -> None:
        """Train the federation for ``rounds`` rounds, resuming from ``ckpt_path`` (``"last"``: the latest version's).

        A run from scratch writes into a new ``version_N`` folder of ``default_root_dir``; a run resumed from a
        checkpoint of one of those folders goes on in that folder. The folder is held for the whole ``fit``: another
        command on it is refused (:meth:`~fedhet.plugins.storage.run_folder.RunFolder.hold`).
        """
        self._files.start()
        path = self.run.resolve_checkpoint(ckpt_path, required=False)
        read = file_identity(path)
        state = self._files.resumable(path)  # read and checked before any process is launched
        self._launch(model, version_of(path, self.default_root_dir) if path is not None else None)
        if file_identity(path) != read:  # replaced by a command that ended before this one held the folder
            state = self._files.resumable(path)
        self._prepare(model, datamodule, "fit")
        if state is not None and path is not None:
            self._restore(state, path, private=self._engine.server_update.private)
            self._files.replay(self._fabric, self.history)
            check_resumed_rounds(state, self.rounds, self.sampler, path)
        self.runner.check(self.context)  # e.g. whether the clients can train in stacks, before any training
        self._files.log_config(self._fabric, model, self.run_config)
        self.fitting = True
        self.should_stop = False
        self._hooks("on_federation_start", module=model)
        self._files.start_work(self.current_round)
        for round_idx in range(self.current_round, self.rounds):
            metrics = self._engine.run_round(round_idx, self._files.meter)
            self.history.append(metrics)
            self._fabric.log_dict(metrics, step=round_idx)
            self.current_round = round_idx + 1
            self._hooks("on_round_end", round_idx=round_idx, metrics=metrics)
            if self.checkpointing.due(self.current_round, self.rounds, self.should_stop):
                self.save_checkpoint(self.run.checkpoints / "last.ckpt")
            if self.should_stop:  # set by a callback (EarlyStopping) in on_round_end
                break
        self.fitting = False
        self._hooks("on_federation_end")
        for logger in self._fabric.loggers:
            logger.finalize("success")
        self._files.write_record("fit", self._engine, self.run_config, self.current_round)

    def validate(
        self, model: LightningModule, datamodule: FederatedData, ckpt_path: str | None = None
    ) -> dict[str, float]:
        """Evaluate every client's personalised model on its validation split."""
        return self._evaluate_only("val", model, datamodule, ckpt_path)

    def test(self, model: LightningModule, datamodule: FederatedData, ckpt_path: str | None = None) -> dict[str, float]:
        """Evaluate every client's personalised model on its test split.

        With a :class:`~fedhet.plugins.NewClients` sampler, the clients it held out of training are left out
        of ``test/...``; each adapts from the final federation and is scored in ``test_new/...``.
        """
        return self._evaluate_only("test", model, datamodule, ckpt_path)

    def client_module(self, client_id: str) -> LightningModule:
        """A new module of the run's class holding ``client_id``'s trained model, on the CPU, in evaluation mode.

        Its layers are built for the client and hold the client's personal parameters and the server's parameters
        for it (what the client evaluates, before any ``adaptation_phases`` fine-tuning), plus the statistics the
        server broadcasts; it can be tested under a plain ``lightning.Trainer`` on the client's ``ClientDataModule``.
        """
        if self._round_engine is None or client_id not in self._round_engine.index:
            known = self._round_engine.client_ids if self._round_engine is not None else []
            raise KeyError(f"client '{client_id}' is not in this federation (clients: {known}); call fit or test first")
        if not self.owns(client_id):
            raise ValueError(f"client '{client_id}' is kept by another process: call client_module there")
        return cast(LightningModule, self.context.trained_module(client_id)).cpu().eval()

    def export_client(self, client_id: str, path: str | Path) -> Path:
        """Write ``client_id``'s trained model (:meth:`client_module`) as a Lightning checkpoint at ``path``.

        ``ModuleClass.load_from_checkpoint(path)`` rebuilds it (hyperparameters, the client's layers and weights)
        in any Lightning project; returns the path.
        """
        return save_lightning_checkpoint(self.client_module(client_id), path)

    @_releases_run_folder
    def export(
        self,
        model: LightningModule,
        datamodule: FederatedData,
        ckpt_path: str | None = "last",
        clients: list[str] | None = None,
    ) -> dict[str, Path]:
        """Export trained clients as Lightning checkpoints into ``clients/`` of the version folder of the run exported.

        ``fedhet export -c <config> --ckpt_path last`` runs this: every client (or those named in ``clients``) of the
        checkpoint's federation, each loadable with its module class's ``load_from_checkpoint`` (:meth:`export_client`).
        Files are named by an encoded client id (:func:`~fedhet.plugins.storage.export.client_file_name`) and written
        atomically; ``clients/index.json`` maps client ids to files. A checkpoint outside a version folder exports
        into a new one.

        Returns:
            the files written by this process, by client id.

        """
        self._load_trained("export", model, datamodule, ckpt_path)
        return self._engine.export(clients, self.client_module, self.run_dir / "clients")

    def log_dict(self, metrics: Mapping[str, float], step: int) -> None:
        """Log ``metrics`` at round ``step`` with the run's loggers (e.g. a server callback's ``flic/anchor_drift``).

        Nothing is logged before the run's processes are launched.
        """
        if self.fabric is not None:
            self.fabric.log_dict(dict(metrics), step=step)

    @property
    def callback_metrics(self) -> dict[str, float]:
        """The metrics of the latest round."""
        return self.history[-1] if self.history else {}

    @property
    def datamodule(self) -> FederatedData:
        """The federation's data of the current ``fit``/``validate``/``test``."""
        return self._engine.datamodule

    @property
    def client_ids(self) -> list[str]:
        """The federation's clients, in order."""
        return list(self._engine.client_ids)

    @property
    def context(self) -> ClientContext:
        """What a client runner uses of this federation (set up by ``fit``, ``validate``, ``test`` or :meth:`setup`)."""
        return self._engine.context

    @property
    def _engine(self) -> RoundEngine:
        """This command's round engine: its clients and their owners, a round, evaluation, checkpoints."""
        if self._round_engine is None:
            raise RuntimeError("FederatedTrainer: no clients yet; call fit, validate, test or setup")
        return self._round_engine

    @property
    def store(self) -> ClientStore:
        """This process's client state store (personal parameters and kept optimizer state, by client id)."""
        return self._store

    @property
    def callbacks(self) -> list[Any]:
        """The run's callbacks: the user's and the module's ``configure_callbacks()``, in calling order."""
        return list(self._hooks.callbacks)

    @property
    def run_dir(self) -> Path:
        """This run's version folder, ``<default_root_dir>/version_N`` (known once fit, validate or test started)."""
        return self.run.path

    @property
    def global_rank(self) -> int:
        """This process's rank."""
        return self._fabric.global_rank if self.fabric is not None else 0

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process that logs and writes checkpoints."""
        return self.global_rank == 0

    # ------------------------------------------------------------------ set-up
    @property
    def _fabric(self) -> Fabric:
        if self.fabric is None:
            raise RuntimeError("FederatedTrainer: no Fabric yet; call fit, validate or test")
        return self.fabric

    def _launch(
        self, model: LightningModule, version: int | None = None, run_folder: bool = True, command: str = "fit"
    ) -> None:
        """Start Fabric's processes (once) and hold the run's version folder for ``command`` (:func:`hold_run`).

        ``run_folder=False`` binds none (nothing of the run is written: no logger, no checkpoint).
        """
        check_engine_module(model)
        if self.fabric is None:
            self.loggers = self._files.with_csv_logger(self.loggers)
            callbacks = federation_callbacks(self.user_callbacks, model, self.loggers, self.reporting.progress_bar)
            self._hooks = CallbackHooks(callbacks, trainer=self)
            self.fabric = start_fabric(self.processes, self.loggers, callbacks)
        if run_folder:
            hold_run(self.fabric, self.run, version, command)

    def setup(
        self, model: LightningModule, datamodule: FederatedData, stage: str = "fit", run_folder: bool = True
    ) -> ClientContext:
        """Launch Fabric, check the clients and initialise the server state, without running a round.

        ``fit``, ``validate`` and ``test`` call it; an adapter that drives clients itself (e.g. a Flower ClientApp)
        calls it once and then :meth:`fit_clients` or ``context.evaluate``. ``run_folder=False`` (for such an
        adapter whose trainer logs and checkpoints nothing) claims no ``version_N`` folder; its client states stay in
        memory (``client_state_budget_mb`` needs the folder to spill into).

        Returns:
            the :class:`~fedhet.plugins.clients.context.ClientContext` of the run.

        """
        self._launch(model, run_folder=run_folder)
        self._prepare(model, datamodule, stage)
        return self.context

    def _prepare(self, model: LightningModule, datamodule: FederatedData, stage: str) -> None:
        """Set up and check the clients (:func:`set_up_engine`), and initialise the server state, before any training.

        A federation without state starts from the module's initial shared parameters and an empty client store.
        """
        budget = self._failure_budget
        self._round_engine = set_up_engine(self, self._fabric, model, datamodule, self._hooks, budget, stage)
        if not self._has_state:
            self.server_state = ServerState(shared=self.context.initial_shared())
            self._store = new_client_store(self._store, self.client_state, self.run, self.global_rank)
            self._has_state = True

    def owns(self, client_id: str) -> bool:
        """Whether this process trains and keeps the state of ``client_id``."""
        return self._engine.owns(client_id)

    # ------------------------------------------------------------------ one round
    def fit_clients(self, client_ids: Sequence[str], round_idx: int) -> RoundUploads:
        """Train ``client_ids`` (clients this process owns) for round ``round_idx`` with the trainer's runner.

        Each client starts from its stored personal state and the current ``server_state``; an admitted client's new
        state is stored. Nothing is aggregated: that is the round's (or a federated runtime's) job.

        Returns:
            the admitted uploads, the failed clients and the bytes sent down to the admitted ones.

        """
        return self._engine.fit_clients(client_ids, round_idx)

    def _load_trained(
        self, command: str, model: LightningModule, datamodule: FederatedData, ckpt_path: str | None
    ) -> None:
        """Launch and restore the trained federation of ``ckpt_path`` (or of the last fit) for ``command``.

        An evaluation (``validate``, ``test``) runs in a new version folder (it never overwrites the training logs); an
        ``export`` sets its clients up as ``test`` does and writes beside the run it exports, in its checkpoint's
        version folder, and leaves that run's config as it is.
        """
        path = self.run.resolve_checkpoint(ckpt_path, required=not self._has_state)
        state = load_checkpoint(path) if path is not None else None
        beside = version_of(path, self.default_root_dir) if command == "export" and path is not None else None
        self._launch(model, beside, command=command)
        if beside is None:
            self._files.save_config(self._fabric, self.run_config)
        self._prepare(model, datamodule, "test" if command == "export" else command)
        if state is not None and path is not None:
            self._restore(state, path)

    @_releases_run_folder
    def _evaluate_only(
        self, stage: str, model: LightningModule, datamodule: FederatedData, ckpt_path: str | None
    ) -> dict[str, float]:
        self._files.start()
        command = "validate" if stage == "val" else "test"
        self._load_trained(command, model, datamodule, ckpt_path)
        self._files.start_work(self.current_round)
        metrics = self._engine.evaluate_command(stage, self.current_round, self._files.meter)
        self._files.write_record(command, self._engine, self.run_config, self.current_round)
        return metrics

    # ------------------------------------------------------------------ checkpoints and logging
    def save_checkpoint(self, path: str | Path) -> None:
        """Write the whole federation (server, every client, callbacks, history) to ``path``, atomically."""
        self._engine.save_checkpoint(path, self.current_round, self.history)

    def _restore(self, state: FederationCheckpoint, path: Path, private: bool | None = None) -> None:
        """Load a checkpoint's federation into this run, once :func:`check_checkpoint_matches` accepts it."""
        clients = self._engine.restore(state, path, private)
        self._store = new_client_store(self._store, self.client_state, self.run, self.global_rank)
        self._store.update(clients)
        self.history = list(state.history)
        self.current_round = state.round
        self._has_state = True
