"""The clipping norms C of the privacy suites: the median client update norm of a run without privacy (seed 0).

``benchmarks/suites/privacy_digits.yaml`` and ``privacy_digits_50.yaml`` clip each client's shared-parameter update
at a fixed C (``fedhet.plugins.UploadPrivacy``). C is the median, over every client and every round, of the L2 norm
of a client's update in the suite's own no-DP run of the method (``fedavg``, ``fedrep``) at seed 0: the run is built
from the suite's config and fixed overrides with the arguments ``fedhet compare`` gives it
(:func:`fedhet.experiments.compare.run_spec`, :func:`fedhet.experiments.runs.arguments`), and a callback records,
before each aggregation, the norm of ``update.shared - server_state.shared`` over all shared tensors
(:func:`fedhet.functional.privacy.global_l2_norm`): the quantity ``UploadPrivacy.privatize`` clips. The table also
gives the C each suite's ``<method>_clip`` run uses, rounded as the suite writes it (3 decimals), and whether the
measured median rounds to it.

Run from the repository root: ``python benchmarks/privacy_clip_norms.py [--rounds N] [--suites FILE ...]``
(``--rounds`` replaces the suites' 30 rounds, for a quick check). Writes
``benchmarks/results/privacy_clip_norms.{csv,md}`` (``--out DIR``: elsewhere).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, environment, write_table
from fedhet.callbacks import FederatedCallback
from fedhet.cli import FederatedCLI
from fedhet.experiments.compare import run_spec
from fedhet.experiments.runs import arguments
from fedhet.experiments.suite import Suite, load_suite
from fedhet.functional.privacy import global_l2_norm

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "benchmarks" / "suites"
DEFAULT_SUITES = (SUITES / "privacy_digits.yaml", SUITES / "privacy_digits_50.yaml")
METHODS = ("fedavg", "fedrep")
SEED = 0
DIGITS = 3  # as the suites write C


class UpdateNorms(FederatedCallback):
    """The global L2 norm of every client's shared-parameter update, in round then client order."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_aggregate_start(self, trainer: Any, round_idx: int, updates: Sequence[Any]) -> None:
        """Record ``||update.shared - sent||`` of each upload (``sent``: the shared parameters of the round)."""
        sent = trainer.server_state.shared
        for update in updates:
            self.norms.append(float(global_l2_norm({n: v - sent[n] for n, v in update.shared.items()})))


def update_norms(suite: Suite, method: str, root: Path, rounds: int | None = None) -> list[float]:
    """Every client update norm of ``method``'s no-DP run of ``suite`` at seed 0 (``rounds``: replace its rounds)."""
    (federation,) = suite.federations
    spec = run_spec(suite, federation, method, SEED, {})
    args = [*arguments(spec, "fit")[1:], f"--trainer.default_root_dir={root}", "--trainer.logger=false"]
    if rounds is not None:
        args.append(f"--trainer.rounds={rounds}")
    probe = UpdateNorms()
    with warnings.catch_warnings():  # the script's own options are not the run's: Lightning would warn of both
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = FederatedCLI(args=args, run=False, trainer_defaults={"callbacks": [probe]})
    cli.trainer.fit(cli.model, cli.datamodule)
    return probe.norms


def suite_clip_norm(suite: Suite, method: str) -> float:
    """The C of the suite's ``<method>_clip`` run."""
    server_update = suite.methods[f"{method}_clip"].overrides["trainer.server_update"]
    return float(server_update["init_args"]["clip_norm"])


def _shown(path: Path) -> str:
    """``path`` relative to the repository, as the results name it (no path of this machine)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=Path, nargs="+", default=list(DEFAULT_SUITES))
    parser.add_argument("--rounds", type=int, default=None, help="replace the suites' rounds (a quick check)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.suites:
            suite = load_suite(path)
            for method in METHODS:
                norms = update_norms(suite, method, Path(tmp) / suite.name / method, args.rounds)
                median, used = statistics.median(norms), suite_clip_norm(suite, method)
                row = {
                    "suite": suite.name,
                    "method": method,
                    "updates": len(norms),
                    "median_norm": median,
                    "min_norm": min(norms),
                    "max_norm": max(norms),
                    "suite_clip_norm": used,
                    "matches": round(median, DIGITS) == used,
                }
                rows.append(row)
                print(f"{suite.name} {method}: median {median:.6f} of {len(norms)} updates; suite C {used}", flush=True)
    for row in rows:
        row["median"] = f"{row['median_norm']:.4f}"
        row["range"] = f"{row['min_norm']:.4f} – {row['max_norm']:.4f}"
        row["matches_shown"] = "yes" if row["matches"] else "no"
    notes = [
        "Median, over every client and every round, of the global L2 norm of a client's shared-parameter update"
        f" (its trained shared parameters minus those it received) in the suite's no-DP run of the method, seed {SEED},"
        " built from the suite's config and overrides as `fedhet compare` builds it: the quantity UploadPrivacy clips."
        f" `suite C`: the clip_norm of the suite's `<method>_clip` run; `matches`: the median rounded to {DIGITS}"
        " decimals equals it.",
    ]
    columns = {"suite": "suite", "method": "method", "updates": "updates", "median": "median norm"}
    columns |= {"range": "min – max", "suite_clip_norm": "suite C", "matches_shown": "matches"}
    env = environment(seed=SEED, config=", ".join(_shown(path) for path in args.suites))
    title = "Clipping norms of the privacy suites"
    print(write_table("privacy_clip_norms", title, rows, columns, notes, env, args.out))


if __name__ == "__main__":
    main()
