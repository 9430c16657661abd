"""``python -m fedhet.experiments.fit_test PLAN``: a suite run's ``fedhet fit`` and then ``fedhet test`` in one process.

A suite run used to start two interpreters, one per command, each paying the start-up of Python, torch and Lightning
before any work; here both commands run as ``python -m fedhet <command>`` runs them (:mod:`runpy`, the ``fedhet``
package's ``__main__`` with ``sys.argv`` set), one after the other in the same interpreter, so the run folder, its
version folders, the resolved ``config.yaml`` and the metrics files are those the two commands write on their own.

``PLAN`` is JSON: ``{"fit": [fit arguments], "test": [test arguments] or null, "test_log": file}``. The fit's output
goes where this process's does (the caller's ``fit.log``); before the test, standard output and error are sent to
``test_log``, so each command keeps its own log and the caller can tell which one failed by whether ``test_log``
exists. A W&B run the fit left open is finished before the test starts, as the end of its process would finish it.
The exit status is the failing command's.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from collections.abc import Sequence
from typing import Any


def _redirect(log: str) -> None:
    """Send this process's standard output and error (Python's and the file descriptors beneath) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _end_of_command() -> None:
    """What the end of a command's own process would do before the next one: finish an open W&B run."""
    wandb: Any = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def run_fedhet(args: Sequence[str]) -> None:
    """Run one ``fedhet`` command as ``python -m fedhet`` would; a failure ends this process with its exit status."""
    sys.argv = [sys.argv[0], *args]  # run_module sets sys.argv[0] to fedhet/__main__.py, as -m does
    try:
        runpy.run_module("fedhet", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    _end_of_command()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the plan given as the one argument (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        sys.exit("usage: python -m fedhet.experiments.fit_test PLAN (JSON: fit, test and test_log)")
    plan = json.loads(argv[0])
    run_fedhet(plan["fit"])
    if plan.get("test") is not None:
        _redirect(plan["test_log"])
        run_fedhet(plan["test"])


if __name__ == "__main__":
    main()
