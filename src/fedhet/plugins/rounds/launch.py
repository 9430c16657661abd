"""Starting a run's processes: the module checked, Fabric built and launched, the run's version folder held.

:class:`~fedhet.plugins.FederatedTrainer` calls these once per command (:meth:`~fedhet.plugins.FederatedTrainer.setup`):
:func:`check_engine_module` before anything starts, :func:`start_fabric` on its first command, :func:`hold_run` on
every command that writes into a run folder.
"""

from __future__ import annotations

from typing import Any, cast

from lightning.fabric import Fabric
from lightning.fabric.loggers.logger import Logger
from lightning.pytorch import LightningModule

from fedhet.core import FederatedModuleProtocol
from fedhet.plugins.processes.distributed import check_multi_node_launch, destroy_process_group_at_exit
from fedhet.plugins.processes.heap import retain_freed_memory
from fedhet.plugins.processes.launcher import use_start_method
from fedhet.plugins.processes.threads import pin_threads
from fedhet.plugins.rounds.options import Processes
from fedhet.plugins.storage.run_folder import RunFolder, RunFolderHeldError


def check_engine_module(model: object) -> None:
    """Refuse a ``model`` that is not a LightningModule implementing the federated module contract."""
    if not isinstance(model, LightningModule) or not isinstance(model, FederatedModuleProtocol):
        raise TypeError(
            f"FederatedTrainer needs a LightningModule implementing the federated module contract"
            f" (e.g. a fedhet.modules.FederatedModule subclass), got {type(model).__name__}"
        )


def start_fabric(processes: Processes, loggers: list[Logger], callbacks: list[Any]) -> Fabric:
    """Build Fabric from ``processes`` and launch its processes, each set up as the options say.

    Every process pins its torch threads after the launcher ran; a CPU process keeps freed memory when
    ``processes.retain_cpu_heap`` is set; with several processes each destroys its process group at exit.

    Returns:
        the launched Fabric (in every process).

    """
    check_multi_node_launch(processes.num_nodes)
    fabric = Fabric(
        accelerator=processes.accelerator,
        strategy=processes.strategy,
        devices=processes.devices,
        num_nodes=processes.num_nodes,
        precision=processes.precision,  # type: ignore[arg-type]
        loggers=loggers,
        callbacks=callbacks,
    )
    use_start_method(fabric, processes.start_method, processes.threads)
    fabric.launch()
    pin_threads(processes.threads)  # in every process, after whatever the launcher set
    if processes.retain_cpu_heap and fabric.device.type == "cpu":
        retain_freed_memory()
    if fabric.world_size > 1:
        destroy_process_group_at_exit()
    return fabric


def hold_run(fabric: Fabric, run: RunFolder, version: int | None, command: str) -> None:
    """Rank 0 holds the run's version folder for ``command`` and every rank binds it, or raises rank 0's refusal.

    The folder is the one ``run`` is bound to, else ``version``, else a new one
    (:meth:`~fedhet.plugins.storage.run_folder.RunFolder.hold`).
    """
    held: int | str | None = None
    if fabric.is_global_zero:
        try:
            held = run.hold(run.version if run.version is not None else version, command)
        except RunFolderHeldError as refused:
            held = str(refused)
    if fabric.world_size > 1:
        held = fabric.broadcast(held)
    if isinstance(held, str):
        raise RunFolderHeldError(held)
    run.bind(cast(int, held))  # rank 0 held it, so every rank holds an int
