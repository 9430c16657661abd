"""The round engine: one command's clients in this process and their owners, a round, evaluation, checkpoints.

:class:`~fedhet.plugins.FederatedTrainer` builds a :class:`RoundEngine` for each command once its processes are launched
and the clients are set up, and drives it: :meth:`RoundEngine.run_round` for each round of a ``fit``,
:meth:`RoundEngine.evaluate` and :meth:`RoundEngine.evaluate_new_clients` for the evaluations,
:meth:`RoundEngine.save_checkpoint` and :meth:`RoundEngine.restore` for the checkpoints, :meth:`RoundEngine.export` for
``export``. :func:`set_up_engine` builds it (and the client context) from the trainer's settings
(:class:`EngineSettings`). The server state and this process's client store stay the trainer's; the engine reads them
through the client context, and :func:`new_client_store` makes the trainer a new store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, cast

from lightning.fabric import Fabric
from lightning.pytorch import LightningModule

from fedhet.core import ClientState, EngineModule, FederatedData, RoundUploads, ServerState
from fedhet.plugins.clients.context import ClientContext, check_federated_datamodule
from fedhet.plugins.clients.runners import ClientRunner
from fedhet.plugins.hooks.dispatch import CallbackHooks
from fedhet.plugins.hooks.server_step import check_server_state, run_server_hook
from fedhet.plugins.processes.distributed import barrier, gather_objects, owner_rank
from fedhet.plugins.rounds.comm import CommTotals
from fedhet.plugins.rounds.new_clients import NEW_CLIENT_STAGE, evaluate_new_clients
from fedhet.plugins.rounds.options import ClientStates, Reporting
from fedhet.plugins.rounds.sampling import ClientSampler
from fedhet.plugins.rounds.summaries import evaluation_metrics, merge_uploads, training_metrics
from fedhet.plugins.storage.callback_state import callback_states, load_callback_states
from fedhet.plugins.storage.checkpoint import FederationCheckpoint, check_checkpoint_matches, save_checkpoint
from fedhet.plugins.storage.client_store import ClientStore
from fedhet.plugins.storage.export import export_clients, write_export_index
from fedhet.plugins.storage.fingerprint import fingerprint_differences
from fedhet.plugins.storage.run_folder import RunFolder
from fedhet.plugins.storage.run_record import CpuMeter
from fedhet.plugins.uploads.policies import FailureBudget, PlainUpdate, ServerUpdate, UploadCheck


class RoundEngine:
    """The clients of one command as this process sees them, and what a round, an evaluation, a checkpoint does.

    Each round: sample clients; train those this process owns with the runner; gather the uploads of every process
    and merge them in client order; let the failure budget decide whether the round goes on; run the server update
    and the aggregation hooks; count the bytes; evaluate every ``reporting.eval_every`` rounds and in the last.

    Args:
        context: the run's client context (its Fabric, module template, callbacks, server state and client store).
        datamodule: the federation's data, already set up.
        server_update: the trainer's server update, or ``None`` for the module's ``configure_aggregator()`` folded
            plainly.
        runner: how this process's clients train and evaluate.
        sampler: which clients take part in a round, and which it holds out of training.
        reporting: how often clients are evaluated, and whether per-client metrics are logged.
        seed: the run's seed.
        rounds: the rounds the run trains.
        comm: the run's byte totals, added to each round.
        failure_budget: how many failing clients a round survives.

    """

    def __init__(
        self,
        context: ClientContext,
        datamodule: FederatedData,
        server_update: ServerUpdate | None,
        runner: ClientRunner,
        sampler: ClientSampler,
        reporting: Reporting,
        seed: int,
        rounds: int,
        comm: CommTotals,
        failure_budget: FailureBudget,
    ) -> None:
        self.context, self.fabric, self.datamodule = context, context.fabric, datamodule
        self.client_ids = list(context.client_ids)
        self.index = {cid: i for i, cid in enumerate(self.client_ids)}
        sampler.validate(len(self.client_ids))
        self.held_out = set(sampler.held_out(self.client_ids, seed))
        self.server_update = server_update or PlainUpdate(context.template.configure_aggregator())
        self.runner, self.sampler, self.reporting = runner, sampler, reporting
        self.seed, self.rounds, self.comm, self.failure_budget = seed, rounds, comm, failure_budget

    def owns(self, client_id: str) -> bool:
        """Whether this process trains and keeps the state of ``client_id``."""
        return owner_rank(self.index[client_id], self.fabric.world_size) == self.fabric.global_rank

    # ------------------------------------------------------------------ one round
    def fit_clients(self, client_ids: Sequence[str], round_idx: int) -> RoundUploads:
        """Train ``client_ids`` (clients this process owns) for round ``round_idx`` with the runner."""
        return self.runner.run(self.context, client_ids, round_idx)

    def run_round(self, round_idx: int, meter: CpuMeter) -> dict[str, float]:
        """Run round ``round_idx`` and return its metrics, adding its CPU seconds to ``meter``."""
        fabric, hooks = self.fabric, self.context.hooks
        start, cpu, cpu_eval = time.perf_counter(), CpuMeter.now(), 0.0
        sampled = self.sampler.sample(self.client_ids, round_idx, self.rounds, self.seed)
        hooks("on_round_start", round_idx=round_idx, client_ids=sampled)
        uploads = self.fit_clients([cid for cid in sampled if self.owns(cid)], round_idx)
        train_s = time.perf_counter() - start
        mark = time.perf_counter()
        gathered = gather_objects(fabric, (uploads, train_s))
        spans = {
            "time/train_s": train_s,
            "time/gather_s": time.perf_counter() - mark,  # with the wait for slower processes
            "time/train_max_s": max(seconds for _, seconds in gathered),  # the slowest process's training
        }
        updates, failures, bytes_down = merge_uploads([part for part, _ in gathered], self.index)
        self.failure_budget.check(round_idx, sampled, updates, failures)

        mark = time.perf_counter()
        shared = self.context.server_state.shared
        updates = self.server_update.prepare(updates, shared, round_idx)
        run_server_hook(hooks, "on_aggregate_start", round_idx, self.context.server_state, updates=updates)
        shared.update(self.server_update.aggregate(updates, shared, len(sampled), round_idx))
        check_server_state(self.context.server_state, round_idx, "the aggregator")
        run_server_hook(hooks, "on_aggregate_end", round_idx, self.context.server_state, updates=updates)
        spans["time/aggregate_s"] = time.perf_counter() - mark

        comm = self.comm.add(up=sum(u.num_bytes for u in updates), down=bytes_down)
        metrics = training_metrics(round_idx, updates, failures, comm)
        metrics.update(self.server_update.metrics(sample_rate=len(sampled) / len(self.client_ids)))
        if (round_idx + 1) % self.reporting.eval_every == 0 or round_idx == self.rounds - 1:
            mark, cpu_mark = time.perf_counter(), CpuMeter.now()
            metrics.update(self.evaluate("val", round_idx))
            spans["time/eval_s"] = time.perf_counter() - mark
            cpu_eval = CpuMeter.now() - cpu_mark
        metrics.update(spans)
        metrics["time/round_s"] = time.perf_counter() - start
        meter.evaluation += cpu_eval
        meter.rounds += CpuMeter.now() - cpu - cpu_eval
        return metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, stage: str, round_idx: int) -> dict[str, float]:
        """Each client evaluates its personalised model on its own ``stage`` split; summaries over clients.

        A client whose evaluation raises (e.g. its data loader fails) is left out of the summaries, named in the log
        and counted in ``clients/{stage}_failed``; the run goes on.
        """
        owned = [cid for cid in self.client_ids if self.owns(cid) and cid not in self.held_out]
        evaluations, failed = self.runner.evaluate(self.context, owned, stage, round_idx)
        gathered = gather_objects(self.fabric, (evaluations, failed))
        metrics = evaluation_metrics(gathered, stage, self.reporting.per_client)
        if not metrics:
            return {}
        self.context.hooks("on_evaluation_end", stage=stage, round_idx=round_idx, metrics=metrics)
        return metrics

    def evaluate_new_clients(self, round_idx: int) -> dict[str, float]:
        """The clients held out of training (:class:`~fedhet.plugins.NewClients`), adapted and scored.

        Each process adapts the held-out clients it owns from the federation as it stands
        (:mod:`fedhet.plugins.rounds.new_clients`); the summaries over all of them are ``test_new/...``.
        """
        if not self.held_out:
            return {}
        owned = [cid for cid in self.client_ids if cid in self.held_out and self.owns(cid)]
        evaluations = evaluate_new_clients(self.context, owned, self.sampler.adapt_epochs, round_idx)
        no_failures: list[str] = []
        gathered = gather_objects(self.fabric, (evaluations, no_failures))
        return evaluation_metrics(gathered, NEW_CLIENT_STAGE, self.reporting.per_client)

    def evaluate_command(self, stage: str, round_idx: int, meter: CpuMeter) -> dict[str, float]:
        """A ``validate`` (``stage="val"``) or ``test`` command's metrics, logged at ``round_idx`` and saved.

        ``test`` adds the held-out clients' ``test_new/...`` (:meth:`evaluate_new_clients`); the CPU seconds go to
        ``meter``'s evaluation.
        """
        cpu = CpuMeter.now()
        metrics = self.evaluate(stage, round_idx)
        if stage == "test":
            metrics.update(self.evaluate_new_clients(round_idx))
        meter.evaluation += CpuMeter.now() - cpu
        self.fabric.log_dict(metrics, step=round_idx)
        for logger in self.fabric.loggers:
            logger.save()
        return metrics

    # ------------------------------------------------------------------ checkpoints and export
    def save_checkpoint(self, path: str | Path, rounds_done: int, history: list[dict[str, float]]) -> None:
        """Write the whole federation (server, every client, callbacks, ``history``) to ``path``, atomically."""
        fabric, callbacks = self.fabric, self.context.hooks.callbacks
        stores = gather_objects(fabric, dict(self.context.store.state_dicts()))
        if fabric.is_global_zero:
            save_checkpoint(
                path,
                FederationCheckpoint(
                    round=rounds_done,
                    rounds=self.rounds,
                    seed=self.seed,
                    client_ids=self.client_ids,
                    server=self.context.server_state.state_dict(),
                    clients={cid: s for part in stores for cid, s in part.items()},
                    callbacks=callback_states(callbacks),
                    history=history,
                    comm_totals=self.comm.state_dict(),
                    privacy=self.server_update.state_dict(),
                    logger_versions=[lg.version for lg in fabric.loggers],
                    fingerprint=self.context.fingerprint(callbacks),
                ),
            )
            for logger in fabric.loggers:
                logger.save()
        barrier(fabric)

    def restore(self, state: FederationCheckpoint, path: Path, private: bool | None) -> dict[str, ClientState]:
        """Load a checkpoint's server, privacy, callback and byte-count states, once it matches this run.

        :func:`~fedhet.plugins.storage.checkpoint.check_checkpoint_matches` accepts it or raises first.

        Returns:
            the states of the clients this process owns, by client id, for the trainer's new client store.

        """
        callbacks = self.context.hooks.callbacks
        differences = fingerprint_differences(state.fingerprint, self.context.fingerprint(callbacks))
        check_checkpoint_matches(state, path, self.client_ids, self.seed, differences, private)
        if state.privacy is not None:
            self.server_update.load_state_dict(state.privacy)
        self.context.server_state.load_state_dict(state.server)
        clients = {cid: ClientState.from_state_dict(s) for cid, s in state.clients.items() if self.owns(cid)}
        load_callback_states(callbacks, state.callbacks)
        self.comm.load_state_dict(state.comm_totals)
        return clients

    def export(
        self, chosen: list[str] | None, module_of: Callable[[str], LightningModule], folder: Path
    ) -> dict[str, Path]:
        """Write the ``chosen`` clients (``None``: every client) this process keeps into ``folder``, and its index.

        :func:`~fedhet.plugins.storage.export.export_clients` writes each client's ``module_of(cid)``; the first
        process writes ``index.json`` (:func:`~fedhet.plugins.storage.export.write_export_index`) over every process's
        files.

        Returns:
            the files written by this process, by client id.

        """
        written = export_clients(self.client_ids, chosen, self.owns, module_of, folder)
        exported = gather_objects(self.fabric, list(written))
        if self.fabric.is_global_zero:
            write_export_index(folder, [cid for part in exported for cid in part])
            print(f"fedhet: exported {sum(map(len, exported))} clients to {folder}", flush=True)
        return written


class EngineSettings(Protocol):
    """What :func:`set_up_engine` reads of the trainer (:class:`~fedhet.plugins.FederatedTrainer`'s attributes)."""

    seed: int
    rounds: int
    local_epochs: int
    local_steps: int | None
    sampler: ClientSampler
    upload_checks: list[UploadCheck]
    server_update: ServerUpdate | None
    runner: ClientRunner
    client_state: ClientStates
    reporting: Reporting
    comm: CommTotals
    server_state: ServerState

    @property
    def store(self) -> ClientStore:
        """This process's client state store."""


def set_up_engine(
    settings: EngineSettings,
    fabric: Fabric,
    model: LightningModule,
    datamodule: FederatedData,
    hooks: CallbackHooks,
    failure_budget: FailureBudget,
    stage: str,
) -> RoundEngine:
    """Set up and check the clients of ``datamodule`` for ``stage``, and a round engine over them.

    The client context reads the server state and the client store from ``settings`` when it uses them (a restore
    replaces both). ``model`` was checked to be a LightningModule implementing the contract
    (:func:`~fedhet.plugins.rounds.launch.check_engine_module`).
    """
    check_federated_datamodule(datamodule)
    datamodule.setup(stage)
    context = ClientContext(
        fabric,
        cast(EngineModule, model),
        datamodule,
        settings.seed,
        settings.local_epochs,
        settings.local_steps,
        hooks,
        settings.upload_checks,
        server_state=lambda: settings.server_state,
        store=lambda: settings.store,
        personal_init=settings.client_state.personal_init,
        check_metric_names=settings.runner.remote_uploads,
    )
    return RoundEngine(
        context,
        datamodule,
        settings.server_update,
        settings.runner,
        settings.sampler,
        settings.reporting,
        settings.seed,
        settings.rounds,
        settings.comm,
        failure_budget,
    )


def new_client_store(old: ClientStore, client_state: ClientStates, run: RunFolder, rank: int) -> ClientStore:
    """An empty client state store, spilling to this run and process's own folder past the memory budget.

    ``old``, the store it replaces, is closed first (which releases its folder).
    """
    old.close()
    if client_state.budget_mb is None:  # all in memory: no folder needed (a trainer may bind none)
        return ClientStore()
    return ClientStore.with_budget(client_state.budget_mb, run.spill_dir(rank), client_state.keep_spilled)
