"""Parse a suite's ``fedhet fit`` command lines before any of them runs.

A suite's runs and tuning trials go through a worker pool in order, so a method whose override names an option its
class does not take (``model.init_args.head_epoch``) or gives a value of the wrong type would otherwise fail only when
its first run starts, possibly hours into the suite. :func:`check_commands` parses every command line as ``fedhet
fit --print_config`` does (jsonargparse checks every key and type against the classes the configs name; nothing is
instantiated, no data is read and no folder is written), all in one subprocess, so the parent process of ``fedhet
compare`` stays free of torch and the cost is one interpreter start plus a fraction of a second per command line.

``python -m fedhet.experiments.preflight COMMANDS`` (JSON: a list of ``fedhet fit`` argument lists, ``fit`` first)
prints, as its last line of standard output, a JSON list holding for each command line ``null`` when it parses, else
the one-line error ``fedhet fit`` gives.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Sequence

_PREFIX = re.compile(r"^.*?\berror: ")


def check_commands(commands: Sequence[Sequence[str]]) -> list[str | None]:
    """Parse each ``fedhet fit`` argument list in one subprocess.

    Args:
        commands: argument lists as :func:`fedhet.experiments.runs.arguments` builds them (``["fit", "-c", ...]``).

    Returns:
        per command line, ``None`` when it parses, else its one-line error.

    Raises:
        RuntimeError: when the subprocess itself fails (its last lines of standard error are named).

    """
    if not commands:
        return []
    proc = subprocess.run(
        [sys.executable, "-m", "fedhet.experiments.preflight", json.dumps([list(c) for c in commands])],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"checking the suite's command lines failed (exit status {proc.returncode}): {tail}")
    errors = json.loads(lines[-1])
    if not isinstance(errors, list) or len(errors) != len(commands):
        raise RuntimeError(f"checking the suite's command lines gave {lines[-1]!r}")
    return errors


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


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command lines given as the one argument (see the module docstring) and print the errors."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        sys.exit("usage: python -m fedhet.experiments.preflight COMMANDS (JSON: a list of fedhet fit argument lists)")
    print(json.dumps([_parse(args) for args in json.loads(argv[0])]))


if __name__ == "__main__":
    main()
