"""Global Layers parity: fedhet against the authors' code (``transferFL/gl``), on the same heart client tensors.

Sun et al., "Global Layers: Non-IID Tabular Federated Learning". The paper's heart task: three clients with their own
columns (Cleveland 13, SAheart 9, Faisalabad 12), split and encoded by fedhet
(:class:`~fedhet.datamodules.datasets.heart.HeartFederation`, ``missing="code"``, the reference's 0.33 / 0.1 split
drawn with each seed); the paper's heart model (E = 16, 8 heads, 6 blocks, S = 128, no gates, frozen batch-norm
statistics); one AdamW per client over all its parameters (lr 1e-3, weight decay 1e-4) kept across rounds;
BatchAlignedFedAvg with B = ``--batches`` steps per epoch of batch ``floor(n_k / B)`` and ``--epochs`` epochs;
layers 2-4 averaged uniformly **once per epoch**, as the reference code does (fedhet:
``aggregate_every="epoch"``; the paper's text averages after every step, fedhet's default). Methods: GL and Local
(no averaging). Each client is tested once after the last epoch; metrics as the reference computes them (AUROC,
balanced accuracy with the logit thresholded at 0.5, AUPRC with class 1 = disease / event as positive, the same
labels on both sides).

Reference (never copied here; pass the checkout with ``--reference-dir``): ``git clone
https://github.com/transferFL/gl`` (used: commit 013161a, its only commit; the large Covertype files are not needed).
Needs ``torcheval`` in the environment that runs this script (``pip install torcheval``; not a fedhet dependency).
``_gl_authors.py`` lists what its adapter changes at run time.

Run from the repository root, e.g.::

    nice -n 19 python benchmarks/parity/gl.py --reference-dir ../gl --seeds $(seq 0 19)

Writes ``benchmarks/results/parity_gl.{md,csv}`` and ``parity_gl_runs.csv`` (one row per run, client and metric).
With ``--reference-start`` fedhet's GL starts as the reference's does (each client's first epoch from the global layers
of its own build, :class:`ReferenceStart`) and the files are ``parity_gl_refstart*``, e.g.::

    nice -n 19 python benchmarks/parity/gl.py --reference-dir ../gl --reference-start --methods GL --seeds $(seq 0 39)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import WORKLOAD, RoundClock, git_commit, record, recorded, recorded_command, reference_kind  # noqa: E402, I001  (puts benchmarks/ on the path)
from _common import environment, quiet_trainer, write_table  # noqa: E402
from _gl_authors import (  # noqa: E402
    METRICS,
    HeartClient,
    fedhet_state,
    reference_model,
    reference_trainer,
    run_reference,
)

from fedhet.callbacks.base import FederatedCallback  # noqa: E402
from fedhet.core import ClientState, LocalPhase, ServerAccess  # noqa: E402
from fedhet.core.spec import ClientSpec  # noqa: E402
from fedhet.plugins import Processes  # noqa: E402
from fedhet.datamodules.datasets.heart import GL_SITES, HeartFederation  # noqa: E402
from fedhet.modules.global_layers import GlobalLayers  # noqa: E402

NAME = "parity_gl"
KINDS = {"heart/models/model.py": "GL authors"}
GLOBAL = {"GL": ("layer2", "layer3", "layer4"), "Local": ()}
LOGS = {"GL": "personalizedfederated", "Local": "orphaned"}  # the reference's names of its runs
SITE_IN_LOGS = {"cleveland": "cleveland", "saheart": "sa", "faisalabad": "faisalabad"}
Scores = dict[str, dict[str, float]]


@dataclass
class HeartRun:
    """One run of one implementation on the heart task.

    Attributes:
        implementation: ``fedhet`` or ``GL authors``.
        method: ``GL`` or ``Local``.
        seed: seed of the split and of the run.
        scores: ``{client: {metric: value}}``, test metrics in [0, 1].
        cpu_per_round: CPU seconds per epoch (= round).

    """

    implementation: str
    method: str
    seed: int
    scores: dict[str, dict[str, float]]
    cpu_per_round: float


def heart_clients(seed: int) -> list[HeartClient]:
    """The three GL heart clients of fedhet for ``seed``: their exact train, validation and test tensors."""
    data = HeartFederation(sites=GL_SITES, missing="code", seed=seed)
    data.setup("fit")
    clients = []
    for cid in data.client_ids:
        client = data.client(cid)
        parts = {}
        for part in ("train", "val", "test"):
            dataset = getattr(client, f"{part}_dataset")
            parts[part] = (dataset.x.clone(), dataset.y.clone())
        clients.append(HeartClient(cid, parts))
    return clients


class ReferenceStart(FederatedCallback):
    """The reference's start in fedhet: each client's first epoch from its own build's global layers, then the mean.

    The reference builds every client's model right after re-seeding torch with the run seed, but the draws taken
    before ``layer2`` (one ``Linear(1, E)`` per column, ``layer1`` of ``F * E`` inputs) depend on the client's number
    of columns, so its clients' global layers start from independent draws and agree only after the first averaging.
    fedhet builds one module per client architecture under one seed too, and a client's personal layers come from
    that same build (``personal_init="shared"``), so giving each client its own build's global layers in round 0 (the
    server's per-client payload, dropped once round 0 is averaged) starts every client from one whole build of its
    own, as the reference does. Only for this comparison: fedhet's GL starts every client from one initialisation.
    """

    server_access = ServerAccess(per_client=["*"])  # drops every client's round-0 payload after round 0

    def on_federation_start(self, trainer: Any, module: torch.nn.Module) -> None:
        """Round 0's payload of each client: the global layers of its own architecture's build."""
        for cid in trainer.client_ids:
            own = trainer.context.slot(cid).module.shared_state_dict()
            trainer.server_state.per_client[cid] = {name: value.detach().cpu().clone() for name, value in own.items()}

    def on_aggregate_end(self, trainer: Any, round_idx: int, server_state: Any, updates: Any) -> None:
        """From round 1 on every client loads the averaged global layers."""
        server_state.per_client.clear()


def run_fedhet(
    method: str, seed: int, epochs: int, batches: int, root: Path, reference_start: bool = False
) -> HeartRun:
    """GL or Local in fedhet, with the reference's schedule (``aggregate_every="epoch"``), tested after the last round.

    ``reference_start``: GL's first epoch starts each client from its own global layers (:class:`ReferenceStart`).
    CPU seconds per round leave out the last round, which also evaluates every client.
    """
    torch.manual_seed(seed)
    clock = RoundClock()
    callbacks: list[Any] = [clock, *([ReferenceStart()] if reference_start and GLOBAL[method] else [])]
    trainer = quiet_trainer(epochs, seed, root / f"{method}_{seed}", log_per_client=True, callbacks=callbacks)
    model = GlobalLayers(global_modules=GLOBAL[method], width=128, batches_per_epoch=batches, aggregate_every="epoch")
    data = HeartFederation(sites=GL_SITES, missing="code", seed=seed)
    trainer.fit(model, data)
    metrics = trainer.test(model, data)
    scores = {site: {m: float(metrics[f"test/{m}/{site}"]) for m in METRICS} for site in GL_SITES}
    return HeartRun("fedhet", method, seed, scores, statistics.fmean(clock.seconds[:-1] or clock.seconds))


def same_start_gap(checkout: Path, client: HeartClient, seed: int, epochs: int, batches: int) -> float:
    """Largest test-logit gap between the two models trained from the same weights on the same batches.

    No engine and no averaging: the reference's model for ``client`` is built with ``seed``, its weights are loaded
    into fedhet's :class:`GlobalLayers` (:func:`_gl_authors.fedhet_state`), and both take ``epochs * batches`` AdamW
    steps (lr 1e-3, weight decay 1e-4) on one sequence of batches of ``floor(n / batches)`` rows, each with its own
    loss (the reference's ``BCEWithLogitsLoss``, fedhet's ``GlobalLayers.loss``), batch norm frozen on both sides.
    """
    theirs = reference_model(checkout, client.parts["train"][0].shape[1], seed)
    ours = GlobalLayers(width=128)
    ours.setup_client(ClientSpec(client.client_id, tuple(client.parts["train"][0].shape[1:]), 2, classes=(0, 1)))
    ours.configure_model()
    ours.load_state_dict(fedhet_state(theirs))
    theirs.eval()  # the reference trains in eval mode (drop_last=True)
    ours.train()
    x, y = client.parts["train"]
    size, generator = len(x) // batches, torch.Generator().manual_seed(seed)
    optimisers = [torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-4) for m in (theirs, ours)]
    their_loss = torch.nn.BCEWithLogitsLoss()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for b in range(batches):
            rows = order[b * size : (b + 1) * size]
            losses = (
                their_loss(theirs(x[rows]).squeeze(), y[rows].float()),
                ours.loss(ours(x[rows]), ours.head_targets(y[rows])),
            )
            for optimiser, loss in zip(optimisers, losses, strict=True):
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
    ours.eval()
    with torch.no_grad():
        return float((theirs(client.parts["test"][0]) - ours(client.parts["test"][0])).abs().max())


class _EpochBatches:
    """The reference's training loader stand-in: its ``e``-th pass yields epoch ``e``'s fixed batches."""

    def __init__(self, epochs: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        self.epochs, self.passes = epochs, 0

    def __iter__(self) -> Any:
        self.passes += 1
        return iter(self.epochs[self.passes - 1])


class _FixedBatchesGlobalLayers(GlobalLayers):
    """GL whose one phase takes its ``B`` steps from the client's own loader.

    Here that loader is :class:`_EpochBatches`' fixed batches; the batch-aligned phase would draw its own shuffled
    batches from the training set.
    """

    def local_phases(self) -> list[LocalPhase]:
        return [LocalPhase("local", steps=self.batches_per_epoch)]


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Torch's default floating dtype set to ``dtype`` for the block (the reference builds its models with it)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def same_start_federation_gap(
    checkout: Path, seed: int, epochs: int, batches: int, dtype: torch.dtype = torch.float32
) -> list[dict[str, float]]:
    """Largest test-logit gap per client after each epoch of the whole GL federation, one start, one batch stream.

    The reference's ``Trainer`` (averaging, AdamW states, its epoch loop with its validation pass) and fedhet's
    ``FederatedTrainer`` (``aggregate_every="epoch"``) start from the reference's initial models, each client from
    its own (global layers included, as the reference starts: :class:`ReferenceStart`'s per-client round-0 payload),
    and each client trains on the same fixed batches of ``floor(n / batches)`` rows in each epoch. With ``dtype``
    ``torch.float64`` both sides compute in double precision (the reference's models, the tensors, fedhet's
    ``precision="64-true"``): a gap that vanishes there is float32 rounding grown by training, not a different
    computation.
    """
    with _default_dtype(dtype):
        return _federation_gap(checkout, seed, epochs, batches, dtype)


def _federation_gap(checkout: Path, seed: int, epochs: int, batches: int, dtype: torch.dtype) -> list[dict[str, float]]:
    clients = heart_clients(seed)
    for client in clients:
        client.parts = {part: (x.to(dtype), y) for part, (x, y) in client.parts.items()}
    generator = torch.Generator().manual_seed(seed)
    fixed: dict[str, list[list[tuple[torch.Tensor, torch.Tensor]]]] = {}
    for client in clients:
        x, y = client.parts["train"]
        size = len(x) // batches
        fixed[client.client_id] = []
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=generator)
            rows = [order[b * size : (b + 1) * size] for b in range(batches)]
            fixed[client.client_id].append([(x[r], y[r]) for r in rows])
    tests = {client.client_id: client.parts["test"][0] for client in clients}
    theirs: list[dict[str, torch.Tensor]] = []
    with reference_trainer(checkout, clients, seed, batches, federate=True) as trainer:
        start = {cid: fedhet_state(model) for cid, model in trainer.models.items()}
        for cid in trainer.models:
            trainer.trains[cid] = _EpochBatches(fixed[cid])
        for _ in range(epochs):
            trainer.train(1)
            with torch.no_grad():
                theirs.append({cid: model(tests[cid]) for cid, model in trainer.models.items()})

    ours: list[dict[str, torch.Tensor]] = []

    class SameStart(ReferenceStart):  # round 0 from the reference's own start; the mean from the first average on
        def on_federation_start(self, trainer: Any, module: torch.nn.Module) -> None:
            shared = trainer.server_state.shared
            for cid in trainer.client_ids:
                trainer.server_state.per_client[cid] = {name: start[cid][name].clone() for name in shared}
                trainer.store[cid] = ClientState({n: v.clone() for n, v in start[cid].items() if n not in shared})
                batches_of = _EpochBatches(fixed[cid])
                trainer.context.client_data(cid).train_dataloader = lambda b=batches_of: b

        def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
            with torch.no_grad():
                ours.append({cid: trainer.client_module(cid)(tests[cid]) for cid in trainer.client_ids})

    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as root:
        precision = "64-true" if dtype == torch.float64 else "32-true"
        processes = Processes(accelerator="cpu", precision=precision)
        federation = quiet_trainer(epochs, seed, root, callbacks=[SameStart()], processes=processes)
        model = _FixedBatchesGlobalLayers(width=128, batches_per_epoch=batches, aggregate_every="epoch")
        federation.fit(model, HeartFederation(sites=GL_SITES, missing="code", seed=seed))
    return [{cid: float((a[cid] - b[cid]).abs().max()) for cid in a} for a, b in zip(theirs, ours, strict=True)]


def logged_scores(checkout: Path, method: str) -> dict[int, Scores]:
    """The authors' logged per-seed test metrics of ``method`` (``heart/log/in-paper``: the paper's results).

    Returns:
        ``{seed: {client: {metric: value}}}``; empty when the checkout lacks the log.

    """
    path = checkout / "heart" / "log" / "in-paper" / f"{LOGS[method]}_test_metrics.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        table = {row[0]: row[1:] for row in csv.reader(f)}
    return {
        int(float(seed)): {
            site: {m: float(table[f"{SITE_IN_LOGS[site]}.{m}"][i]) for m in METRICS} for site in GL_SITES
        }
        for i, seed in enumerate(table["seed"])
    }


def _spread(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{100 * statistics.fmean(values):.2f} ± {100 * std:.2f}"


def _paired(differences: list[float]) -> str:
    """Mean paired difference ± its standard error, and how many standard errors that is."""
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return f"{100 * mean:+.2f}"
    error = statistics.stdev(differences) / len(differences) ** 0.5
    ratio = f"{mean / error:+.1f}" if error > 0 else "n/a"
    return f"{100 * mean:+.2f} ± {100 * error:.2f} ({ratio} s.e.)"


def table_rows(runs: list[HeartRun], reference: str, logs: dict[str, dict[int, Scores]]) -> list[dict[str, str]]:
    """One row per (method, client, metric) over the seeds both sides ran, then one CPU row per method.

    A method the reference did not run (``--sides fedhet`` without recorded reference runs) gets fedhet's columns
    over fedhet's seeds, the reference's left empty. ``logs``: the authors' logged scores by method
    (:func:`logged_scores`), compared on the same seeds where present.
    """
    rows = []
    for method in GLOBAL:
        ours = {r.seed: r for r in runs if (r.implementation, r.method) == ("fedhet", method)}
        theirs = {r.seed: r for r in runs if (r.implementation, r.method) == (reference, method)}
        seeds = sorted(set(ours) & set(theirs)) or sorted(ours)
        if not seeds:
            continue
        both = all(s in theirs for s in seeds)
        logged = logs.get(method, {})
        for site in GL_SITES:
            for metric in METRICS:
                a = [ours[s].scores[site][metric] for s in seeds]
                b = [theirs[s].scores[site][metric] for s in seeds] if both else []
                c = [logged[s][site][metric] for s in seeds if s in logged]
                rows.append(
                    {
                        "method": method,
                        "client": site,
                        "metric": metric,
                        "seeds": str(len(seeds)),
                        "fedhet": _spread(a),
                        "reference": _spread(b) if both else "",
                        "difference": _paired([x - y for x, y in zip(a, b, strict=True)]) if both else "",
                        "logs": _spread(c) if len(c) == len(seeds) else "",
                        "code_vs_logs": _paired([x - y for x, y in zip(b, c, strict=True)])
                        if both and len(c) == len(seeds)
                        else "",
                    }
                )
        rows.append(
            {
                "method": method,
                "client": "all",
                "metric": "CPU s / round",
                "seeds": str(len(seeds)),
                "fedhet": f"{statistics.fmean(ours[s].cpu_per_round for s in seeds):.3f}",
                "reference": f"{statistics.fmean(theirs[s].cpu_per_round for s in seeds):.3f}" if both else "",
                "difference": "",
                "logs": "",
                "code_vs_logs": "",
            }
        )
    return rows


NOTES = [
    "Both implementations train on fedhet's exact client tensors (same split and encoding per seed), with the same"
    " model, epochs, steps per epoch, batch sizes, optimiser and averaging schedule (once per epoch, as the"
    " reference). Metrics ×100: mean ± std over seeds; the difference column is the mean over seeds of fedhet minus"
    " the reference on the same seed's split, ± its standard error (a difference within about 2 s.e. is seed noise:"
    " the two sides draw different initial weights and batch orders from the same seed). CPU s / round:"
    " `time.process_time` per epoch, one torch thread, niced on a 2-core machine shared with other jobs (fedhet: the"
    " round without evaluation; the reference: its epoch including its validation pass).",
    "",
    "Authors' logs: the per-seed test metrics the authors logged for the paper (`heart/log/in-paper/"
    "{personalizedfederated,orphaned}_test_metrics.csv` in their repository; their own split and encoding of the"
    " same seed, run on an Apple M2). Where the authors' code on fedhet's tensors matches them to float noise, fedhet"
    " hands it the very rows and encoding the paper used (SAheart, Faisalabad). Cleveland cannot match: the reference"
    " labels Cleveland 1 = no disease, fedhet (and both sides here) 1 = disease, so the logged AUPRC scores the other"
    " class and the logged runs trained on flipped targets.",
    "",
    "Known differences between the sides (from reading the code; the table measures their effect): the reference"
    " re-seeds torch before building each client's model, so its clients' global layers start from different draws"
    " (their entity embeddings consume a number of draws that depends on the client's columns) and agree only after"
    " the first averaging, where fedhet starts every client from one shared initialisation of the global layers;"
    " likewise the reference draws each client's head after its own input layers, where fedhet starts every client's"
    " head from the first client's draw (`client_state.personal_init: shared`, the default since 0.2.0: Cleveland's"
    " head as before, SAheart's and Faisalabad's from other draws than in the tables of 0.1.0, which moves their"
    " per-seed scores, Local's included: each is another draw from the same distribution);"
    " the two sides shuffle batches with different generators; the reference runs a validation pass every epoch"
    " (it changes no weight: batch norm is frozen and gradients are off; its shuffled loaders only move the random"
    " stream).",
]

REFERENCE_START_NOTE = [
    "",
    "fedhet's GL here starts as the reference does (`--reference-start`, `ReferenceStart`): in the first epoch every"
    " client trains from the global layers of its own build (the reference's clients draw theirs independently: the"
    " draws before layer2 depend on the client's number of columns), and from the first averaging on from the mean."
    " fedhet's own GL starts every client from one initialisation of the global layers (`parity_gl.md`).",
]


def _federation_gap_note(gaps: list[dict[str, float]] | None, precision: str) -> list[str]:
    """The notes' lines on :func:`same_start_federation_gap`'s per-epoch gaps (none when it was not run)."""
    if not gaps:
        return []
    epochs = ", ".join(str(e + 1) for e in range(len(gaps)))
    per_client = "; ".join(f"{cid} " + " / ".join(f"{gap[cid]:.0e}" for gap in gaps) for cid in gaps[0])
    return [
        "",
        f"The whole GL federation from one start (`same_start_federation_gap`, seed 0, {precision}): the reference's"
        " `Trainer` and fedhet's `FederatedTrainer` from the reference's initial models (each client's own, global"
        " layers included) on the same batches, averaging once per epoch; largest test-logit difference after epochs"
        f" {epochs}: {per_client}.",
    ]


def write_results(
    runs: list[HeartRun],
    references: dict[str, Path],
    epochs: int,
    batches: int,
    gaps: dict[str, tuple[float, ...]],
    federation_gaps: list[dict[str, float]] | None = None,
    federation_gaps64: list[dict[str, float]] | None = None,
    reference_start: bool = False,
) -> str:
    """The side-by-side table (``results/parity_gl.{md,csv}``) and every run's scores (``parity_gl_runs.csv``).

    ``gaps``: :func:`same_start_gap` per client (seed 0) after one epoch and after ``epochs``, in the notes;
    ``federation_gaps`` / ``federation_gaps64``: :func:`same_start_federation_gap` (seed 0) per epoch, in float32 and in
    float64. With ``reference_start`` the files are
    ``parity_gl_refstart*`` and fedhet's GL runs started as the reference does (:class:`ReferenceStart`).
    """
    name = f"{NAME}_refstart" if reference_start else NAME
    reference = "GL authors"
    env = environment(config=WORKLOAD)
    env["command"] = recorded_command(env["command"], references)
    used = "; ".join(f"{kind} at commit {git_commit(path)}" for kind, path in references.items()) or "none"
    text = write_table(
        name,
        "Global Layers parity: fedhet vs the authors' code (heart)"
        + (", fedhet started as the reference starts" if reference_start else ""),
        table_rows(
            runs, reference, {m: logged_scores(references[reference], m) for m in GLOBAL if reference in references}
        ),
        {
            "method": "method",
            "client": "client",
            "metric": "metric",
            "seeds": "seeds",
            "fedhet": "fedhet",
            "reference": "authors' code",
            "difference": "fedhet − authors (paired)",
            "logs": "authors' logs, same seeds",
            "code_vs_logs": "authors' code − logs (paired)",
        },
        notes=[
            f"Setting: heart clients {', '.join(GL_SITES)}; {epochs} epochs of B = {batches} steps; GL averages"
            " layer2-4 once per epoch; Local never averages.",
            f"References: {used}.",
            "",
            *NOTES,
            *(REFERENCE_START_NOTE if reference_start else []),
            *(
                [
                    "",
                    "Same model, loss and optimiser step, without the engine (`same_start_gap`, seed 0): the"
                    " reference's initial weights loaded into fedhet's `GlobalLayers`, both trained with AdamW on the"
                    f" same batches; largest test-logit difference after {batches} / {epochs * batches} steps: "
                    + ", ".join(f"{cid} {early:.1e} / {late:.1e}" for cid, (early, late) in gaps.items())
                    + ".",
                ]
                if gaps
                else []
            ),
            *_federation_gap_note(federation_gaps, "float32"),
            *_federation_gap_note(federation_gaps64, "float64 on both sides"),
        ],
        env=env,
    )
    runs_csv = Path(__file__).resolve().parents[1] / "results" / f"{name}_runs.csv"
    with runs_csv.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["implementation", "method", "seed", "client", "metric", "value", "cpu_per_round"])
        for r in runs:
            for site, scores in r.scores.items():
                for metric, value in scores.items():
                    writer.writerow([r.implementation, r.method, r.seed, site, metric, value, r.cpu_per_round])
    return text


def main() -> None:
    """Run both sides for every seed and write the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-dir", type=Path, action="append", default=[], help="a checkout of transferFL/gl")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(20)))
    parser.add_argument("--epochs", type=int, default=10, help="epochs = rounds (the paper's heart: 10)")
    parser.add_argument("--batches", type=int, default=5, help="B: steps per client per epoch (the heart logs: 5)")
    parser.add_argument("--sides", nargs="+", default=None, help="run only these sides: fedhet, 'GL authors'")
    parser.add_argument("--root", type=Path, default=Path("fedhet_runs/parity"), help="fedhet's run folders")
    parser.add_argument("--table-only", action="store_true", help="write the table from the runs recorded under --root")
    parser.add_argument("--methods", nargs="+", default=list(GLOBAL), choices=list(GLOBAL), help="methods to run")
    parser.add_argument(
        "--reference-start",
        action="store_true",
        help="fedhet's GL starts each client from its own global layers, as the reference does (ReferenceStart);"
        " runs are recorded as parity_gl_refstart and written to results/parity_gl_refstart*",
    )
    args = parser.parse_args()
    name = f"{NAME}_refstart" if args.reference_start else NAME
    torch.set_num_threads(1)
    references = {reference_kind(path, KINDS): path for path in args.reference_dir}
    sides = set(args.sides or ["fedhet", *references])
    for seed in [] if args.table_only else args.seeds:
        clients = heart_clients(seed)
        for method in args.methods:
            if "fedhet" in sides:
                run = run_fedhet(method, seed, args.epochs, args.batches, args.root, args.reference_start)
                record(run, args.root, name)
            if "GL authors" in references and "GL authors" in sides:
                scores, cpu = run_reference(
                    references["GL authors"], clients, seed, args.epochs, args.batches, federate=method == "GL"
                )
                record(HeartRun("GL authors", method, seed, scores, cpu), args.root, name)
    gaps, federation_gaps, federation_gaps64 = {}, None, None
    if "GL authors" in references:
        for client in heart_clients(0):
            gaps[client.client_id] = tuple(
                same_start_gap(references["GL authors"], client, 0, epochs, args.batches) for epochs in (1, args.epochs)
            )
        federation_gaps = same_start_federation_gap(references["GL authors"], 0, args.epochs, args.batches)
        federation_gaps64 = same_start_federation_gap(
            references["GL authors"], 0, args.epochs, args.batches, dtype=torch.float64
        )
    runs = recorded(args.root, name, HeartRun)
    print(
        write_results(
            runs,
            references,
            args.epochs,
            args.batches,
            gaps,
            federation_gaps,
            federation_gaps64,
            reference_start=args.reference_start,
        )
    )


if __name__ == "__main__":
    main()
