"""Start-up CPU of single commands: ``fedhet --help``, a Flower ClientApp import, and ``fedhet fit`` before round 1.

Each measurement runs in a fresh interpreter (CPU = user + system seconds of that process, from ``getrusage``), the
median of ``--repeats``. ``fedhet fit -c configs/fedavg/digits.yaml`` is broken down by the stage that spends the CPU
before its first round starts: the interpreter; the imports of torch and Lightning; fedhet's own imports (the
command line, the engine, the config's model and data classes); parsing the config and building the model, data and
trainer objects; the data (the clients' splits: ``datamodule.setup``); and the model (``fit`` until round 1 starts:
the launch, each client's module, the server state). Targets (issue 41): ``fedhet --help`` <= 2.5 s, the ClientApp
import <= 4.0 s, fedhet's own share of the fit's start <= 1 s. Writes ``results/startup.md`` with the commit and the
machine's load (take figures on a quiet machine).
``python benchmarks/startup.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import RESULTS_DIR, current_commit

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "fedavg" / "digits.yaml"

_FIT_STAGES = """import json, resource, sys

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

marks = [("interpreter", cpu())]
import torch, lightning.pytorch, lightning.pytorch.cli
marks.append(("torch + Lightning imports", cpu()))
from fedhet.callbacks.accuracy_curve import AccuracyCurve
from fedhet.cli import FederatedCLI
from fedhet.datamodules import DigitsFederation
from fedhet.modules import FedAvg
marks.append(("fedhet imports", cpu()))
cli = FederatedCLI(args=sys.argv[1:], run=False, trainer_defaults={"callbacks": [AccuracyCurve()]})
marks.append(("config parsing (model, data, trainer objects)", cpu()))
cli.datamodule.setup("fit")
marks.append(("data (clients' splits)", cpu()))

from fedhet.callbacks.base import FederatedCallback

class FirstRound(FederatedCallback):
    def on_round_start(self, trainer, round_idx, client_ids):
        marks.append(("model (fit until round 1: launch, client modules, server state)", cpu()))
        raise SystemExit(0)

cli.trainer.user_callbacks.append(FirstRound())
try:
    cli.trainer.fit(cli.model, cli.datamodule)
except SystemExit:
    pass
print(json.dumps(marks))
"""


def _cpu_of(code: str, *args: str) -> float:
    """CPU seconds of a fresh interpreter running ``code`` (its own and its children's)."""
    before = os.times()
    subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True, capture_output=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def fit_stages(root: str) -> list[tuple[str, float]]:
    """CPU seconds of each stage of ``fedhet fit -c configs/fedavg/digits.yaml`` before round 1, in one process."""
    args = ["-c", str(CONFIG), f"--trainer.default_root_dir={root}", "--trainer.reporting.progress_bar=false"]
    out = subprocess.run(
        [sys.executable, "-c", _FIT_STAGES, *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    marks = json.loads(out.strip().splitlines()[-1])
    return [(name, value - (marks[i - 1][1] if i else 0.0)) for i, (name, value) in enumerate(marks)]


def main() -> None:
    """Measure and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per measurement (median)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    commands = {
        "`fedhet --help`": "from fedhet.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "`import fedhet`": "import fedhet",
        "Flower ClientApp module (`import fedhet.integrations.flower.apps`)": "import fedhet.integrations.flower.apps",
    }
    singles: dict[str, float] = {}
    for label, code in commands.items():
        try:
            singles[label] = statistics.median(_cpu_of(code) for _ in range(args.repeats))
        except subprocess.CalledProcessError:  # Flower not installed
            continue
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            runs.append(fit_stages(str(Path(tmp) / f"fit{k}")))
    stages = {name: statistics.median(run[i][1] for run in runs) for i, (name, _) in enumerate(runs[0])}
    load_after = os.getloadavg()
    lines = [
        "# Start-up CPU of single commands (benchmarks/startup.py)",
        "",
        f"- commit: `{current_commit()}`; CPUs: {os.cpu_count()}; median of {args.repeats} fresh processes each",
        f"- load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}",
        f"- command: `python benchmarks/startup.py --repeats {args.repeats}`",
        "",
        "| command | CPU s |",
        "|---|---|",
        *(f"| {label} | {value:.2f} |" for label, value in singles.items()),
        "",
        "`fedhet fit -c configs/fedavg/digits.yaml` before round 1:",
        "",
        "| stage | CPU s |",
        "|---|---|",
        *(f"| {name} | {value:.2f} |" for name, value in stages.items()),
        f"| **total before round 1** | **{sum(stages.values()):.2f}** |",
    ]
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
