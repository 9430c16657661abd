"""The ``fedhet`` command: ``fedhet fit|validate|test|export -c config.yaml`` and ``fedhet compare -c suite.yaml``.

:func:`main` (the console script, and ``python -m fedhet``) answers ``fedhet --help`` from
:data:`~fedhet.cli_text.COMMANDS` and hands ``compare`` to :mod:`fedhet.experiments.compare`, so neither loads
Lightning; the other commands run :class:`FederatedCLI`, whose module (with Lightning and the engine) is imported on
first use of a name below.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports
from fedhet.cli_text import COMMANDS, DESCRIPTION

if TYPE_CHECKING:
    from fedhet.cli._lightning import FederatedArgumentParser, FederatedCLI, PlainHelpFormatter

__all__ = ["FederatedArgumentParser", "FederatedCLI", "PlainHelpFormatter", "main", "usage"]


def usage() -> str:
    """What ``fedhet``, ``fedhet -h`` and ``fedhet --help`` print: the commands, each with one line."""
    width = max(map(len, COMMANDS))
    return "\n".join(
        [
            f"usage: fedhet {{{','.join(COMMANDS)}}} ...",
            "",
            DESCRIPTION,
            "",
            "commands:",
            *(f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()),
            "",
            "fedhet <command> --help lists a command's options.",
        ]
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``fedhet`` console script.

    A usage error (an unknown option, a wrong type, a value a class refuses) ends the command with one line on
    standard error, the sentence that matters first, and exit status 2 (:class:`FederatedArgumentParser`); a data or
    setup error (a missing data file, nothing trained yet for ``test``, a checkpoint that does not match) with one
    line and exit status 1; a run stopped because too many clients' uploads went non-finite (training diverged)
    with exit status 3 (:data:`~fedhet.plugins.uploads.policies.DIVERGED_EXIT_STATUS`), which a suite's tuner scores as
    a bad trial. ``--debug`` (anywhere on the command line) or ``FEDHET_DEBUG=1`` shows jsonargparse's whole report and
    the traceback instead. ``fedhet`` alone, ``-h`` or ``--help`` lists the commands.
    """
    argv = list(sys.argv[1:] if args is None else args)
    if argv[:1] == ["compare"]:  # suites of fits in subprocesses, not a LightningCLI subcommand
        from fedhet.experiments.compare import main as compare_main

        compare_main(argv[1:])
        return
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)  # a missing command is a usage error, as argparse has it
    debug = "--debug" in argv or os.environ.get("FEDHET_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    if args is None:  # Lightning reads the command line itself (and warns when given both)
        sys.argv[1:] = argv
    from fedhet.cli._lightning import run

    run(None if args is None else argv, debug)


__getattr__, __dir__ = lazy_exports(__name__, __file__)
