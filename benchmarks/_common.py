"""What the benchmark scripts share: a trainer that only trains, the machine's description, table writing."""

from __future__ import annotations

import csv
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def quiet_trainer(
    rounds: int,
    seed: int = 0,
    root: str | Path = "fedhet_runs/benchmarks",
    stack_clients: int | None = None,
    eval_every: int | None = None,
    log_per_client: bool = False,
    **overrides: Any,
) -> FederatedTrainer:
    """A CPU ``FederatedTrainer`` with no logger, progress display, checkpoints or per-client logging.

    Clients are evaluated only after the last round (the engine always evaluates then) unless ``eval_every`` says
    otherwise, so a benchmark's time goes to training. ``stack_clients`` trains clients in stacks; ``overrides``
    replace any other trainer argument.
    """
    settings: dict[str, Any] = {
        "rounds": rounds,
        "seed": seed,
        "processes": Processes(accelerator="cpu", stack_clients=stack_clients),
        "logger": False,
        "checkpointing": Checkpointing(every=0),
        "reporting": Reporting(eval_every=eval_every or rounds + 1, per_client=log_per_client, progress_bar=False),
        "default_root_dir": str(root),
    }
    return FederatedTrainer(**{**settings, **overrides})


def current_commit() -> str:
    """The short hash of ``HEAD``, ``-dirty`` appended when the measured code has uncommitted changes.

    The measured code: ``src/``, this file and the running script (``sys.argv[0]``). ``unknown`` outside a git
    checkout. ``check_results.py`` compares the hash with the code's latest version.
    """
    root = Path(__file__).resolve().parent.parent
    script = Path(sys.argv[0]).resolve()
    paths = ["src", str(Path(__file__).resolve()), *([str(script)] if script.is_file() else [])]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=10, cwd=root
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--", *paths],
            capture_output=True, text=True, check=True, timeout=30, cwd=root,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if changes else commit


def machine() -> str:
    """The machine in words: CPU model, logical CPUs, memory, GPU (no host name)."""
    cpu = platform.processor() or platform.machine()
    memory = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB"
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} CPUs{memory}, {gpu}"


def environment(seed: int | None = None, config: str | None = None) -> dict[str, str]:
    """Date, command, commit and machine of a benchmark run, for the footer of its results.

    ``config`` names the config or suite the numbers come from, or says that the script builds its own workload.
    """
    import lightning

    env = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", *sys.argv]),
        "commit": current_commit(),
        "machine": machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "torch threads": str(torch.get_num_threads()),
        "cpus": str(os.cpu_count()),
        "platform": platform.platform(),
    }
    if seed is not None:
        env["seed"] = str(seed)
    if config is not None:
        env["config"] = config
    return env


def write_table(
    name: str,
    title: str,
    rows: Sequence[dict[str, Any]],
    columns: dict[str, str],
    notes: Sequence[str] = (),
    env: dict[str, str] | None = None,
    out_dir: Path = RESULTS_DIR,
) -> str:
    """Write ``rows`` to ``<out_dir>/<name>.csv`` (every key) and ``<name>.md`` (``columns``: key -> header).

    Returns:
        The Markdown text written.

    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# {title}", "", *notes, "" if notes else None, "| " + " | ".join(columns.values()) + " |"]
    lines = [line for line in lines if line is not None]
    lines.append("|" + "---|" * len(columns))
    lines += ["| " + " | ".join(str(row.get(key, "")) for key in columns) + " |" for row in rows]
    lines += ["", *(f"- {key}: `{value}`" for key, value in (env or environment()).items()), ""]
    text = "\n".join(lines)
    (out_dir / f"{name}.md").write_text(text)
    return text
