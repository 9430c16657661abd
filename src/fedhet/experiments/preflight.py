"""Parse a suite's ``fedhet fit`` command lines before any of them runs.

A suite's runs and tuning trials go through a worker pool in order, so a method whose override names an option its
class does not take (``model.init_args.head_epoch``) or gives a value of the wrong type would otherwise fail only when
its first run starts, possibly hours into the suite. :func:`check_commands` parses every command line as ``fedhet
fit --print_config`` does (jsonargparse checks every key and type against the classes the configs name; nothing is
instantiated, no data is read and no folder is written), all in one child of the suite's warm run processes
(:mod:`~fedhet.experiments.warm`), so the parent process of ``fedhet compare`` stays free of torch and the cost is a
fraction of a second per command line.

A command line may come with the validation metric a tuner will choose on: once it parses, the model class its
config names is imported (not built) and the metric is refused when the class computes it from a domain adaptation
target's labels (:func:`~fedhet.experiments.trials.check_label_free`).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

_PREFIX = re.compile(r"^.*?\berror: ")


def check_commands(commands: Sequence[Sequence[str]], metrics: Sequence[str | None] | None = None) -> list[str | None]:
    """Parse each ``fedhet fit`` argument list in one child of the warm run processes (:mod:`~.warm`).

    Args:
        commands: argument lists as :func:`fedhet.experiments.runs.arguments` builds them (``["fit", "-c", ...]``).
        metrics: per command line, the validation metric a tuner chooses on (``None``: no tuning), checked against
            the model class's ``target_label_metrics``.

    Returns:
        per command line, ``None`` when it parses, else its one-line error.

    Raises:
        RuntimeError: when the child itself fails (its exit status is named).

    """
    if not commands:
        return []
    from fedhet.experiments import warm

    try:
        plan = [list(c) for c in commands], list(metrics or [None] * len(commands))
        errors, _ = warm.call(parse_all, *plan, log=Path(os.devnull))  # its warnings: not ours
    except warm.ChildExitError as ended:
        raise RuntimeError(f"checking the suite's command lines failed (exit status {ended.status})") from None
    return list(errors)


def parse_all(commands: Sequence[Sequence[str]], metrics: Sequence[str | None]) -> list[str | None]:
    """:func:`_parse` of each command line with its tuning metric, in this process."""
    return [_parse(args, metric) for args, metric in zip(commands, metrics, strict=True)]


def _parse(args: Sequence[str], metric: str | None = None) -> str | None:
    """``None`` when ``fedhet <args> --print_config`` parses (and ``metric`` reads no target label), else the error.

    The error is the first line of ``fedhet``'s, without the program name.
    """
    from fedhet.experiments.fit_test import run_fedhet

    said, printed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
        try:
            run_fedhet([*args, "--print_config"])
        except SystemExit as stop:
            code = stop.code  # run_fedhet returns on a zero status, so this is a refusal
        else:
            return None if metric is None else _label_free(printed.getvalue(), metric)
    text = code if isinstance(code, str) else said.getvalue()  # sys.exit(line), or a usage error on stderr
    lines = [line for line in text.splitlines() if line.strip()]
    error = next((line for line in lines if _PREFIX.match(line)), lines[0] if lines else "")  # not a warning
    return _PREFIX.sub("", error) or f"exit status {code}"


def _label_free(config: str, metric: str) -> str | None:
    """``None`` unless the model class of the printed ``config`` computes ``metric`` from a target's labels."""
    from fedhet.experiments.trials import check_label_free

    class_path = str((yaml.safe_load(config) or {}).get("model", {}).get("class_path", ""))
    module_name, _, name = class_path.rpartition(".")
    if not module_name:
        return None
    try:
        check_label_free(metric, getattr(importlib.import_module(module_name), name), "tuning", "metric")
    except ValueError as err:
        return str(err)
    return None
