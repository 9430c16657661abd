"""A deployed fedhet federation on Flower against the same config simulated, and where a deployed round's time goes.

On loopback (``docs/deployment.md``'s recipe, run as ``tests/integrations/test_flower_deployment.py`` runs it: a
SuperLink, 3 SuperNodes and their warm ClientApp processes on 127.0.0.1), each method's federation is deployed with
``flwr run`` and simulated with ``python -m fedhet fit``: the mean ``time/round_s`` (``time/train_s``,
``time/eval_s``) of each run's ``metrics.csv`` and the wall time of each command. ``--cold`` also deploys on SuperNodes
in Flower's default isolation (a ``flwr-clientapp`` process per message). Beside them: what a fresh process pays to
import the ClientApp (``fedhet.integrations.flower.apps``) and Flower's ``flwr-clientapp`` code, what building a
node's client costs, and how long the warm processes took to answer each message (their log).

    python benchmarks/flower_deployment.py --methods FedAvg FedRep --rounds 5 --cold

Writes ``results/flower_deployment.md`` and ``.csv`` (``--name``), naming the commit, the machine's load and the
command.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integrations.flower_helpers import write_config  # noqa: E402
from tests.integrations.flower_loopback import APP, Loopback  # noqa: E402

from _common import environment, write_table  # noqa: E402

COLUMNS = ("time/round_s", "time/train_s", "time/eval_s")

IMPORT_PROBE = """
import json, resource, sys, time
started = time.perf_counter()
import {module}
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"wall_s": time.perf_counter() - started, "cpu_s": r.ru_utime + r.ru_stime}}))
"""

BUILD_PROBE = """
import json, sys, time
from pathlib import Path
from flwr.app import Context, RecordDict
from fedhet.integrations.flower.apps import node_client
seconds = []
for run_id in (1, 2):
    started = time.perf_counter()
    node_client(Path(sys.argv[1]), Context(run_id, 1, {{"client-id": "client_000"}}, RecordDict(), {{}}))
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
"""


def load() -> str:
    """The machine's load averages (``/proc/loadavg``: 1, 5, 15 minutes) and its CPU count."""
    first = Path("/proc/loadavg").read_text().split()[:3]
    return f"load average {' '.join(first)} on {os.cpu_count()} CPUs"


def probe(code: str, *args: str) -> object:
    """Run ``code`` in a fresh Python process; what it printed last, as JSON."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_means(root: Path) -> dict[str, float]:
    """The mean of each of :data:`COLUMNS` over a run's logged rounds (``nan``: never logged)."""
    (path,) = root.glob("version_*/metrics.csv")
    rows = [row for row in csv.DictReader(path.open()) if row.get("round")]
    return {c: mean(float(r[c]) for r in rows if r.get(c)) if any(r.get(c) for r in rows) else float("nan")
            for c in COLUMNS}  # fmt: skip


def config_record(args: argparse.Namespace) -> str:
    """Which config each method ran: the deployment tests' template with the run's rounds and overrides."""
    return (
        "tests/integrations/flower_helpers.py write_config(method, rounds={r}, eval_every={r}) for {m};"
        " overrides --trainer.local_epochs {e}".format(r=args.rounds, m=", ".join(args.methods), e=args.local_epochs)
    )


def simulate(config: Path, root: Path, args: list[str]) -> float:
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "fedhet", "fit", "-c", str(config), "--trainer.default_root_dir", str(root), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as each SuperNode's processes (one per client, one machine)
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800, cwd=ROOT, env=env)
    return time.perf_counter() - started


#: ``--server-poll-s``, an experiment on the benchmark's copy of the app only: the ServerApp's grid polls for
#: replies every ``{poll}`` s instead of Flower 1.42's fixed 3 s (``HttpGrid.send_and_receive``).
SERVER_POLL = """
import time as _time
from flwr.superlink.grid.http_grid import HttpGrid as _HttpGrid


def _send_and_receive(self, messages, *, timeout=None):
    waiting = set(self.push_messages(messages))
    end = _time.time() + (timeout if timeout is not None else float("inf"))
    replies = []
    while waiting and _time.time() < end:
        pulled = list(self.pull_messages(waiting))
        replies += pulled
        waiting -= {reply.metadata.reply_to_message_id for reply in pulled}
        if waiting:
            _time.sleep({poll})
    return replies


_HttpGrid.send_and_receive = _send_and_receive
"""


def deploy(
    loopback: Loopback, work: Path, config: Path, root: Path, args: list[str], server_poll_s: float | None = None
) -> float:
    app = work / "app"
    shutil.copytree(APP, app)
    shutil.copy(config, app / "federation.yaml")
    if server_poll_s is not None:
        with (app / "fedhet_app.py").open("a") as module:
            module.write(SERVER_POLL.replace("{poll}", str(server_poll_s)))
    fedhet_args = " ".join(["--trainer.default_root_dir", str(root), *args])
    wall, done = loopback.run(app, f"fedhet-args='{fedhet_args}' wait-s=600 reply-timeout-s=1200")
    if done.returncode != 0:
        raise RuntimeError(f"flwr run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    shutil.rmtree(app)
    return wall


def answered(log: str, since: int) -> dict[str, float]:
    """Mean seconds the warm ClientApp processes took per message kind, in their log after offset ``since``."""
    found: dict[str, list[float]] = {}
    for kind, seconds in re.findall(r"(\w+) message of round \S+ answered in ([\d.]+) s", log[since:]):
        found.setdefault(kind, []).append(float(seconds))
    return {kind: mean(values) for kind, values in found.items()}


def measure(args: argparse.Namespace, work: Path) -> dict:
    extra = ["--trainer.local_epochs", str(args.local_epochs)]
    configs = {}
    for method in args.methods:
        path = work / method / "federation.yaml"
        path.parent.mkdir(parents=True)
        configs[method] = write_config(path, method, work / "unused", rounds=args.rounds, eval_every=args.rounds)
    result: dict = {"load_start": load(), "methods": {}, "flwr": importlib.metadata.version("flwr")}
    result["server_poll_s"] = args.server_poll_s
    result["import_apps"] = probe(IMPORT_PROBE.format(module="fedhet.integrations.flower.apps"))
    result["import_flwr_clientapp"] = probe(IMPORT_PROBE.format(module="flwr.supernode.runtime.run_clientapp"))
    result["build_node_client_s"] = probe(BUILD_PROBE.format(), str(configs[args.methods[0]]))
    for method, config in configs.items():
        sim_root = work / method / "simulated"
        wall = simulate(config, sim_root, extra)
        result["methods"][method] = {"simulated": {"wall_s": wall, **run_means(sim_root)}}
    modes = ["warm", *(["server_poll"] if args.server_poll_s else []), *(["cold"] if args.cold else [])]
    for mode in modes:
        with Loopback(work / f"flwr_home_{mode}", warm=mode != "cold") as loopback:
            for method, config in configs.items():
                root = work / method / mode
                since = len(loopback.log("nodes"))
                poll = args.server_poll_s if mode == "server_poll" else None
                wall = deploy(loopback, work / method, config, root, extra, poll)
                entry = {"wall_s": wall, **run_means(root)}
                if mode != "cold":
                    entry["answered_s"] = answered(loopback.log("nodes"), since)
                result["methods"][method][mode] = entry
    result["load_end"] = load()
    return result


def _f(value: float, digits: int = 2) -> str:
    return "-" if value != value else f"{value:.{digits}f}"


RUNS = {
    "simulated": "`fedhet fit`",
    "warm": "`flwr run`, warm ClientApp processes",
    "server_poll": "`flwr run`, warm, ServerApp polling every {poll} s (experiment)",
    "cold": "`flwr run`, a process per message",
}
COLUMNS_MD = {
    "method": "method",
    "run": "run",
    "round_s": "mean time/round_s",
    "train_s": "time/train_s",
    "eval_s": "time/eval_s",
    "wall_s": "command wall s",
    "ratio": "round / simulated",
}


def rows(result: dict) -> list[dict[str, str]]:
    """One row per method and run: its mean round, train and evaluation times, its command's wall time."""
    table = []
    for method, runs in result["methods"].items():
        base = runs["simulated"]["time/round_s"]
        for run, entry in runs.items():
            table.append({
                "method": method,
                "run": RUNS[run].format(poll=result.get("server_poll_s")),
                "round_s": _f(entry["time/round_s"]),
                "train_s": _f(entry["time/train_s"]),
                "eval_s": _f(entry["time/eval_s"]),
                "wall_s": _f(entry["wall_s"], 1),
                "ratio": f"{_f(entry['time/round_s'] / base, 1)}x",
            })  # fmt: skip
    return table


def notes(result: dict, args: argparse.Namespace) -> list[str]:
    """The set-up, the load, and where the time goes (imports, a client's build, the warm processes' answers)."""
    apps, clientapp = result["import_apps"], result["import_flwr_clientapp"]
    build = result["build_node_client_s"]
    lines = [
        f"flwr {result['flwr']}, digits, 3 clients (one SuperNode each), {args.rounds} rounds, local_epochs"
        f" {args.local_epochs}, evaluation after the last round; all processes on one machine, one thread each"
        " (`OMP_NUM_THREADS=1`): the simulation trains the clients one after the other, the deployment at once. Load:"
        f" {result['load_start']} at the start, {result['load_end']} at the end (a shared machine: read the ratios,"
        " measured in one script).",
        "",
        "Where the time goes:",
        "",
        f"- a fresh process importing `fedhet.integrations.flower.apps`: {apps['wall_s']:.1f} s wall,"
        f" {apps['cpu_s']:.1f} s CPU; Flower's `flwr-clientapp` code (`flwr.supernode.runtime.run_clientapp`):"
        f" {clientapp['wall_s']:.1f} s wall, {clientapp['cpu_s']:.1f} s CPU. A process per message pays both, then"
        f" builds the node's client: {build[0]:.2f} s (the process's first build), {build[1]:.2f} s (a later one).",
    ]
    for method, runs in result["methods"].items():
        if "answered_s" in runs.get("warm", {}):
            kinds = ", ".join(f"{k} {v:.3f} s" for k, v in sorted(runs["warm"]["answered_s"].items()))
            lines.append(f"- {method}, warm processes, mean time from claiming a message to its answer: {kinds}.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["FedAvg", "FedRep"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="also SuperNodes with a process per message")
    parser.add_argument("--server-poll-s", type=float, help="also: the ServerApp polling every this many s")
    parser.add_argument("--name", default="flower_deployment", help="results/<name>.md and .csv")
    args = parser.parse_args()
    env = environment()
    env["config"] = config_record(args)
    with tempfile.TemporaryDirectory(prefix="fedhet_flower_bench_") as work:
        result = measure(args, Path(work))
    title = "A deployed round against a simulated one (Flower on loopback)"
    print(write_table(args.name, title, rows(result), COLUMNS_MD, notes(result, args), env))


if __name__ == "__main__":
    main()
