"""Parse a suite's ``fedhet fit`` command lines before any of them runs.

A suite's runs and tuning trials go through a worker pool in order, so a method whose override names an option its
class does not take (``model.init_args.head_epoch``) or gives a value of the wrong type would otherwise fail only when
its first run starts, possibly hours into the suite. :func:`check_commands` parses every command line as ``fedhet
fit --print_config`` does (jsonargparse checks every key and type against the classes the configs name; nothing is
instantiated, no data is read and no folder is written), all in one child of the suite's warm run processes
(:mod:`~fedhet.experiments.warm`), so the parent process of ``fedhet compare`` stays free of torch and the cost is a
fraction of a second per command line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path

_PREFIX = re.compile(r"^.*?\berror: ")


def check_commands(commands: Sequence[Sequence[str]]) -> list[str | None]:
    """Parse each ``fedhet fit`` argument list in one child of the warm run processes (:mod:`~.warm`).

    Args:
        commands: argument lists as :func:`fedhet.experiments.runs.arguments` builds them (``["fit", "-c", ...]``).

    Returns:
        per command line, ``None`` when it parses, else its one-line error.

    Raises:
        RuntimeError: when the child itself fails (its exit status is named).

    """
    if not commands:
        return []
    from fedhet.experiments import warm

    try:
        errors, _ = warm.call(parse_all, [list(c) for c in commands], log=Path(os.devnull))  # its warnings: not ours
    except warm.ChildExitError as ended:
        raise RuntimeError(f"checking the suite's command lines failed (exit status {ended.status})") from None
    return list(errors)


def parse_all(commands: Sequence[Sequence[str]]) -> list[str | None]:
    """:func:`_parse` of each command line, in this process."""
    return [_parse(args) for args in commands]


def _parse(args: Sequence[str]) -> str | None:
    """``None`` when ``fedhet <args> --print_config`` parses, else its error's first line without the program name."""
    from fedhet.experiments.fit_test import run_fedhet

    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        try:
            run_fedhet([*args, "--print_config"])
            return None
        except SystemExit as stop:
            code = stop.code  # run_fedhet returns on a zero status, so this is a refusal
    text = code if isinstance(code, str) else said.getvalue()  # sys.exit(line), or a usage error on stderr
    lines = [line for line in text.splitlines() if line.strip()]
    error = next((line for line in lines if _PREFIX.match(line)), lines[0] if lines else "")  # not a warning
    return _PREFIX.sub("", error) or f"exit status {code}"
