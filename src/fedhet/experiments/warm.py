"""Warm run processes: a suite's runs start as fresh children of a process that imported torch, Lightning and fedhet.

A suite is many short runs, and a fresh interpreter pays several CPU seconds importing torch, Lightning and fedhet
before a run's first round. ``fedhet compare`` instead starts one fork server (:mod:`multiprocessing`'s
``forkserver``) that imports them once (:data:`PRELOAD`: the engine, the command line, every method, federation and
callback module) and builds the ``fit`` and ``test`` parsers once, to fill their caches
(:mod:`fedhet.cli._parser_warmup`), and runs nothing else; each run (and the suite's command-line check) is a new
child forked from it.
The child starts from the server's pristine state, never from another run's: it takes its own environment and
number of threads, sends its output to its own log, builds everything from its own config and seeds every draw
itself, so its numbers are those of the same command in a fresh process (``tests/experiments/test_warm.py``).

The server runs no computation, so no OpenMP thread pool exists when it forks; a child pins its threads (as its
run's ``trainer.processes.threads`` does again) before any work. Kills: a killed
child ends with its signal as exit status and only its run is lost (it resumes from its checkpoint); a child kills
itself when the process that asked for it ends (a pipe that process holds open reaches its end), and the server ends
once that process and its children have, so a killed ``fedhet compare`` leaves no run writing behind it and loses
only the rounds since its runs' last checkpoints. CPU seconds are the child's own (user + system, and its
children's): a forked child's counters start at zero.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["PRELOAD", "ChildExitError", "call"]

PRELOAD = (
    "torch",
    "lightning.pytorch",
    "fedhet.cli._lightning",
    "fedhet.cli._parser_warmup",
    "fedhet.experiments.fit_test",
    "fedhet.experiments.preflight",
    "fedhet.experiments.warm",
    "matplotlib.pyplot",
    "optuna",
    "sklearn.datasets",  # the digits federations' data
    "torch.utils.serialization",  # a checkpoint's save and load
    "fsspec.implementations.chained",
    "encodings.utf_8_sig",  # a CSV federation's files
)
"""The modules the fork server imports; every module of ``fedhet.modules``, ``fedhet.datamodules`` (with its datasets)
and ``fedhet.callbacks`` is added (:func:`_preload`). A module that cannot be imported (an extra not installed) is
skipped, as the child will import it, and fail, as a fresh process would."""

_PACKAGES = ("fedhet.modules", "fedhet.datamodules", "fedhet.datamodules.datasets", "fedhet.callbacks")


class ChildExitError(RuntimeError):
    """A child ended without returning: it exited (a command's failure status) or was killed (a negative status).

    Attributes:
        status: the child's exit status (``-N`` for signal ``N``).

    """

    def __init__(self, status: int) -> None:
        super().__init__(f"the run's process ended with exit status {status}")
        self.status = status


def _preload() -> list[str]:
    """:data:`PRELOAD` and every module of the packages that configs name classes from."""
    import importlib
    import pkgutil

    names = list(PRELOAD)
    for package in _PACKAGES:
        path = importlib.import_module(package).__path__
        names += [info.name for info in pkgutil.iter_modules(path, f"{package}.")]
    return names


@functools.cache
def _context() -> multiprocessing.context.ForkServerContext:
    """The fork server's context, its preload set (the server itself starts with the first child)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preload())
    return context


def _die_with_parent(parent_alive: Connection) -> None:
    """Kill this process (SIGKILL) when ``parent_alive`` reaches its end: the process that started it has ended.

    The process that asked for this child holds the other end open until the child ends; if that process dies, the
    operating system closes it, and a thread of this child, blocked reading, wakes up.
    """

    def watch() -> None:
        try:
            parent_alive.recv()
        except EOFError:
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="fedhet-parent-watch", daemon=True).start()


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _redirect(log: str) -> None:
    """Send this process's standard output and error (the file descriptors beneath Python's too) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _child(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    log: str | None,
    threads: int | None,
    env: Mapping[str, str],
    send: Connection,
    parent_alive: Connection,
) -> None:
    """A forked child's work: its environment, threads and log, then ``function(*args)``, whose value is sent back."""
    _die_with_parent(parent_alive)
    os.environ.update(env)
    if threads is not None:
        from fedhet.plugins.processes.threads import pin_threads

        pin_threads(threads)
    if log is not None:
        _redirect(log)
    value = function(*args)  # a SystemExit or an exception ends the child with its status, sending nothing
    send.send((value, _cpu_seconds()))


def call(
    function: Callable[..., Any],
    *args: Any,
    log: Path | None = None,
    threads: int | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Any, float]:
    """Run ``function(*args)`` in a new child of the warm fork server; return its value and the child's CPU seconds.

    Args:
        function: a module-level function (the child imports it by name); its arguments and value are pickled.
        *args: its arguments.
        log: the file the child's standard output and error go to (``None``: the server's).
        threads: the child's compute threads (:func:`~fedhet.plugins.processes.threads.pin_threads`; its
            ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` too; ``None``: the default of a fresh process).
        env: environment variables the child sets before anything runs.

    Raises:
        ChildExitError: when the child ended without returning (a failure's exit status, or killed).

    """
    variables = dict(env or {})
    if threads is not None:
        variables["OMP_NUM_THREADS"] = variables["MKL_NUM_THREADS"] = str(threads)
    context = _context()
    receive, send = context.Pipe(duplex=False)
    parent_alive, alive = context.Pipe(duplex=False)  # this process holds ``alive`` open while the child runs
    child = context.Process(
        target=_child,
        args=(function, args, None if log is None else str(log), threads, variables, send, parent_alive),
    )
    child.start()
    send.close()  # the child holds the only write end: its end (return or death) ends the wait below
    parent_alive.close()
    value, cpu = None, None
    try:
        value, cpu = receive.recv()
    except EOFError:  # the child ended without sending
        pass
    finally:
        receive.close()
        child.join()
        alive.close()
    if cpu is None:
        raise ChildExitError(child.exitcode if child.exitcode is not None else -1)
    return value, float(cpu)
