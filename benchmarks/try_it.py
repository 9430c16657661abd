"""Wall time of every ``fedhet`` command the README offers to try, run as written from a fresh working directory.

The commands are read from the README: the quick-start block and the ``try it`` column of the methods table. They run
in order in one temporary working directory (so ``--ckpt_path last`` finds the run before it), with the progress
display off; each one's wall time and exit status go to ``benchmarks/results/try_it.md``. The README promises about a
minute on a laptop CPU; the machine is named in the results footer.

    python benchmarks/try_it.py [--only flic] [--timeout 900]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(readme: Path) -> list[str]:
    """The ``fedhet ...`` commands of the README's bash blocks and of its methods table's ``try it`` column."""
    text = readme.read_text()
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("fedhet "):
                commands.append(" ".join(line.split()))
            elif " && fedhet " in line:
                commands.append(line[line.index("fedhet ") :].strip())
    commands += re.findall(r"\| `(fedhet fit -c [^`]+)`", text)
    return list(dict.fromkeys(commands))


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    """Run the commands and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="run only the commands containing this text")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a command is stopped")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import environment, write_table

    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore"}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for command in readme_commands(ROOT / "README.md"):
            if args.only not in command or "--print_config" in command:
                continue
            argv = shlex.split(command)
            argv = [str(ROOT / a) if a.startswith("configs/") else a for a in argv]
            argv = [sys.executable, "-m", "fedhet", *argv[1:], "--trainer.reporting.progress_bar", "false"]
            start, cpu = time.perf_counter(), _children_cpu()
            try:
                done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=args.timeout)
                status = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
            except subprocess.TimeoutExpired:
                status = f"stopped after {args.timeout:.0f} s"
            seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
            rows.append({"command": f"`{command}`", "seconds": f"{seconds:.0f}", "cpu": f"{cpu:.0f}", "status": status})
            print(f"{seconds:7.1f} s wall {cpu:7.1f} s cpu  {status[:40]:40s}  {command}", flush=True)
            _write(rows, write_table, environment)  # after every command: a stopped run keeps what it measured


def _write(rows: list[dict[str, str]], write_table: Any, environment: Any) -> None:
    write_table(
        "try_it",
        "Wall time of the README's try-it commands",
        rows,
        {"command": "command", "seconds": "wall time (s)", "cpu": "CPU time (s)", "status": "status"},
        notes=[
            "Each command as the README gives it, run in order in one fresh working directory, progress off. CPU time"
            " is the user + system time of the command's processes: on a shared machine it is the better guide to"
            " what a laptop needs, since wall time there includes the waits for other users' processes."
        ],
        env=environment(),
    )


if __name__ == "__main__":
    main()
