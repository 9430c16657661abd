"""What a command reads and writes in its run's version folder, besides the round metrics and the checkpoints it saves.

:class:`~fedhet.plugins.FederatedTrainer` keeps one :class:`RunFiles`: the checkpoint a ``fit`` resumes, read and
checked before any process is launched; the config (``config.yaml`` and the loggers' hyperparameters); the CSV rows of
the rounds a resumed ``fit`` goes on from; and the command's run record with the CPU seconds it measured
(:mod:`~fedhet.plugins.storage.run_record`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric
from lightning.fabric.loggers.logger import Logger
from lightning.pytorch import LightningModule

from fedhet.plugins.processes.distributed import gather_objects
from fedhet.plugins.rounds.engine import RoundEngine
from fedhet.plugins.storage.checkpoint import FederationCheckpoint, load_checkpoint, resumed_logger_version
from fedhet.plugins.storage.run_folder import RunCSVLogger, RunFolder
from fedhet.plugins.storage.run_record import CpuMeter, CpuSeconds, add_record, make_record


class RunFiles:
    """The run's config, record and resumed checkpoint, in its version folder.

    Args:
        run: the run's folders.
        record: whether the run keeps its CSV record (``metrics.csv``) and its run record (the trainer's ``logger``
            is not ``False``).

    """

    def __init__(self, run: RunFolder, record: bool) -> None:
        self.run = run
        self.record = record
        self.meter = CpuMeter()
        self.threads, self.first_round = torch.get_num_threads(), 0

    def start(self) -> None:
        """A command starts: its CPU seconds are measured from here (:class:`CpuMeter`)."""
        self.meter = CpuMeter()

    def start_work(self, first_round: int) -> None:
        """The command's work starts after its set-up, the federation having trained ``first_round`` rounds.

        Its CPU seconds of work are measured from here; its record keeps torch's threads now.
        """
        self.meter.start_work()
        self.threads, self.first_round = torch.get_num_threads(), first_round

    def with_csv_logger(self, loggers: list[Logger]) -> list[Logger]:
        """``loggers``, with the run's CSV record (:class:`RunCSVLogger`) added when the run keeps one."""
        if self.record and not any(isinstance(lg, RunCSVLogger) for lg in loggers):
            return [*loggers, RunCSVLogger(self.run)]
        return loggers

    def resumable(self, path: Path | None) -> FederationCheckpoint | None:
        """The checkpoint a ``fit`` resumes, if any; a logger version naming a folder outside the run is refused."""
        state = load_checkpoint(path) if path is not None else None
        if state is not None and path is not None:  # untrusted content
            resumed_logger_version(state, self.run.root, path)
        return state

    def log_config(self, fabric: Fabric, model: LightningModule, config: dict[str, Any] | None) -> None:
        """Log the run's config (``model``'s class and hyperparameters without one) to the loggers, and save it."""
        class_path = f"{type(model).__module__}.{type(model).__qualname__}"
        logged = config or {"model": {"class_path": class_path, "init_args": dict(model.hparams)}}
        for logger in fabric.loggers:
            logger.log_hyperparams(logged)
        self.save_config(fabric, config)

    def save_config(self, fabric: Fabric, config: dict[str, Any] | None) -> None:
        """Write the CLI's resolved config as ``config.yaml`` into the run's version folder."""
        if fabric.is_global_zero and config is not None:
            self.run.save_config(config)

    def replay(self, fabric: Fabric, history: list[dict[str, float]]) -> None:
        """Log a resumed checkpoint's rounds over the rows the run's CSV file holds for them (not to other loggers)."""
        if not self.record:
            return
        for logger in fabric.loggers:
            if isinstance(logger, RunCSVLogger):
                for metrics in history:
                    row: dict[str, Any] = dict(metrics)
                    logger.log_metrics(row, step=int(metrics["round"]))

    def write_record(self, command: str, engine: RoundEngine, config: dict[str, Any] | None, rounds_done: int) -> None:
        """Write the command's :class:`~fedhet.plugins.storage.run_record.RunRecord` (CPU summed over the processes).

        Args:
            command: ``fit``, ``validate`` or ``test``.
            engine: the command's round engine (its client context: module, callbacks, fingerprint; its data; seed).
            config: the CLI's resolved config, if any.
            rounds_done: the rounds the federation has trained (the command trained those since :meth:`start_work`).

        """
        context = engine.context
        fabric, callbacks = context.fabric, context.hooks.callbacks
        cpu = sum(gather_objects(fabric, self.meter.finish()), CpuSeconds())
        if not (fabric.is_global_zero and self.record and self.run.version is not None):
            return
        record = make_record(
            command,
            threads=self.threads,
            seed=engine.seed,
            rounds_done=rounds_done,
            rounds_trained=rounds_done - self.first_round,
            cpu=cpu,
            fingerprint=context.fingerprint(callbacks),
            config=config,
            classes=(type(context.template), type(engine.datamodule), *map(type, callbacks)),
        )
        add_record(self.run.path, record)
