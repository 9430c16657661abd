"""How a run's processes on one machine start: forked from rank 0 where that is safe, else the command run again.

Lightning's default launcher for ``devices=N`` on one machine starts ranks ``1..N-1`` when rank 0 reaches ``fit``, by
running the whole command again in new interpreters (``LOCAL_RANK=k python ...``): each pays the interpreter's
start-up, the imports, the config and the data while rank 0 waits for it at the first collective. On a 2-core machine
that was 3.4 s of a 9-second command (``benchmarks/processes.py``). :class:`ForkLauncher` instead forks rank 0 at that
point: a child goes on from ``fit`` as its rank with everything rank 0 had already built, and runs the rest of the
command as a re-run process would (every rank runs the whole program either way).

Forking is only safe in a process that has no other threads, or whose children run one compute thread each:
PyTorch's CPU wheels run their parallel regions on GNU OpenMP, whose thread pool does not survive a fork, and a child
that starts a parallel region of more than one thread after its parent ran one waits forever (measured with torch
2.13: parent 2 threads then child 2 threads hangs; child 1 thread, or a parent that never ran a parallel region, does
not). :func:`fork_refusal` checks those conditions; ``start_method="auto"`` (the trainer's default) forks only when it
returns ``None`` and otherwise keeps Lightning's launcher. Neither launcher sets the processes' compute threads (as
Lightning's does, to the machine's cores over the processes): the trainer sets its own number in every process
(:mod:`fedhet.plugins.processes.threads`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal, cast

from lightning.fabric import Fabric
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver, _SubprocessScriptLauncher

from fedhet.plugins.processes.distributed import dead_children, note_launcher_pid

log = logging.getLogger(__name__)

StartMethod = Literal["auto", "fork", "popen"]


class ForkedProcess:
    """A forked child, watched like a ``subprocess.Popen`` (``pid``, ``returncode``, ``poll``, ``send_signal``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status once the child ended (negative: the signal that killed it), else ``None``."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is gone
                return None
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signal: int) -> None:
        """Send ``signal`` to the child if it still runs."""
        if self.poll() is None:
            os.kill(self.pid, signal)


def other_python_threads() -> list[str]:
    """The names of this process's Python threads other than the calling one (a logger's, a progress display's...)."""
    return [thread.name for thread in threading.enumerate() if thread is not threading.current_thread()]


def fork_refusal(fabric: Fabric, threads: int) -> str | None:
    """Why ``fabric``'s processes cannot be forked from this one safely, or ``None`` if they can.

    ``threads`` is the compute threads each process runs after the launch (the trainer's ``processes.threads``).

    Forking needs: Lightning's per-machine script launcher (not torchrun, SLURM or a spawn strategy), a CPU run (no
    accelerator context to inherit), ``os.fork`` and ``/proc`` (Linux), no Python thread besides this one (a thread
    holding a lock at the fork would leave it held in the child), and either no other thread at all or one compute
    thread per process (see the module's docstring).
    """
    launcher = fabric.strategy.launcher
    if not isinstance(launcher, _SubprocessScriptLauncher) or type(launcher) not in _REPLACEABLE:
        return f"the strategy's launcher is {type(launcher).__name__}, not Lightning's per-machine script launcher"
    if launcher.cluster_environment.creates_processes_externally:
        return "the processes are started by an external launcher"
    if fabric.device.type != "cpu":
        return f"the run is on {fabric.device.type}, and a forked child must not inherit its context"
    if not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"):
        return "this system has no os.fork or /proc/self/task (forking is only used on Linux)"
    others = other_python_threads()
    if others:
        return f"other Python threads run in this process ({', '.join(others)})"
    running = len(os.listdir("/proc/self/task"))
    if running > 1 and threads > 1:
        return (
            f"this process runs {running} threads (PyTorch's OpenMP pool) and each process would run {threads}"
            " compute threads; a forked child could hang in its first parallel region (set processes.threads to 1"
            " to fork)"
        )
    return None


class NamingObserver(_ChildProcessObserver):
    """Lightning's watch over the children of rank 0, which names the failed rank before it ends the run.

    Lightning's observer looks at the children every 5 s and, when one has failed, kills the others and rank 0 at
    once, which can be before rank 0's next collective would have named the lost process; this one first logs
    ``rank 0: lost the other processes of the run: rank k (pid p) was killed by SIGKILL``.
    """

    def _terminate_all(self) -> None:
        dead = dead_children(list(self._child_processes)) or "a child process failed"
        log.error("rank 0: lost the other processes of the run: %s", dead)
        sys.stderr.flush()
        super()._terminate_all()


def watch_children(children: list[subprocess.Popen[bytes]]) -> None:
    """Start a :class:`NamingObserver` over ``children`` (rank 0's ranks ``1..``)."""
    NamingObserver(main_pid=os.getpid(), child_processes=children).start()


class PopenLauncher(_SubprocessScriptLauncher):
    """Lightning's launcher (ranks ``1..N-1`` run the command again), with a :class:`NamingObserver` watching them."""

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the other ranks of this machine (once), then call ``function`` in every process."""
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            self._call_children_scripts()
            watch_children(self.procs)
        return function(*args, **kwargs)


class ForkLauncher(_SubprocessScriptLauncher):
    """Lightning's per-machine launcher with ranks ``1..N-1`` forked from rank 0 instead of run again.

    Each child sets the environment a re-run process would get (``LOCAL_RANK``; ``MASTER_ADDR``, ``MASTER_PORT``,
    ``NODE_RANK`` and ``WORLD_SIZE`` as rank 0 sets them) and goes on from the call that launched it; rank 0 watches the
    children as Lightning's launcher watches its subprocesses (a child that fails ends the run).
    """

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Fork the other ranks of this machine (once), then call ``function`` in every process."""
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally and not self._fork_children():
            watch_children(self.procs)
        return function(*args, **kwargs)

    def _fork_children(self) -> bool:
        """Fork ranks ``1..N-1``; ``True`` in a child (its ``LOCAL_RANK`` set), ``False`` in rank 0."""
        self._check_can_spawn_children()
        os.environ["MASTER_ADDR"] = self.cluster_environment.main_address
        os.environ["MASTER_PORT"] = str(self.cluster_environment.main_port)
        os.environ["NODE_RANK"] = str(self.cluster_environment.node_rank())
        os.environ["LOCAL_RANK"] = "0"
        os.environ["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        sys.stdout.flush()  # buffered output would otherwise be written by every child too
        sys.stderr.flush()
        parent = os.getpid()
        for local_rank in range(1, self.num_processes):
            pid = os.fork()
            if pid == 0:
                os.environ["LOCAL_RANK"] = str(local_rank)
                self.procs = []
                note_launcher_pid(parent)
                return True
            self.procs.append(cast(subprocess.Popen[bytes], ForkedProcess(pid)))  # the observer uses what both have
        return False


#: The launchers :func:`use_start_method` replaces: Lightning's per-machine script launcher, or ours in its place.
_REPLACEABLE = (_SubprocessScriptLauncher, PopenLauncher)


def use_start_method(fabric: Fabric, start_method: StartMethod, threads: int) -> str:
    """Give ``fabric``'s strategy a :class:`ForkLauncher` when ``start_method`` asks for forking and it is safe.

    Args:
        fabric: the run's Fabric, not launched yet.
        start_method: ``"fork"`` (fork, or refuse), ``"popen"`` (Lightning's launcher: run the command again) or
            ``"auto"`` (fork when :func:`fork_refusal` allows it, else ``"popen"``).
        threads: the compute threads of each process after the launch.

    Returns:
        ``"fork"`` or ``"popen"``: how the processes start (``"popen"`` also for one process).

    Raises:
        ValueError: ``start_method="fork"`` where forking is not safe, with the reason.

    """
    if fabric.world_size == 1:
        return "popen"
    refusal = fork_refusal(fabric, threads) if start_method != "popen" else "popen asked"
    if refusal is not None and start_method == "fork":
        raise ValueError(f"FederatedTrainer: field 'start_method' is 'fork', but {refusal}")
    method = "popen" if refusal is not None else "fork"
    launcher = fabric.strategy.launcher
    if isinstance(launcher, _SubprocessScriptLauncher) and type(launcher) in _REPLACEABLE:  # ours name a lost rank
        kind = PopenLauncher if method == "popen" else ForkLauncher
        # Lightning's strategies keep their launcher in `_launcher` and offer no setter
        cast(Any, fabric.strategy)._launcher = kind(
            launcher.cluster_environment, launcher.num_processes, launcher.num_nodes
        )
    return method
