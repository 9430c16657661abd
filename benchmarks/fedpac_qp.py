"""FedPAC's classifier collaboration: the QP weights of one run as a heat map, and the cost of the server step.

Xu, Tong & Huang, "Personalized Federated Learning with Feature Alignment and Classifier Collaboration", ICLR 2023.
One FedPAC run on a scale of the reproduction's recipes (``_fedpac_recipes.py``: the paper's dominant-class
partition, clients in 5 interleaved groups, client ``i`` in group ``i mod 5``). The last round's combination weights
are drawn with the clients ordered by group and summarised: the mean weight a client puts on clients of its own group
(a group is 1/5 of the clients), its mean weight on itself and its mean number of partners. Then the cost of the
server step (one QP per client) on synthetic 5-group statistics (K = 10 classes, d = 128) for 20, 100 and 500
clients.

The accuracy of FedPAC, its ablations and baselines comes from the suites
``benchmarks/suites/fedpac_fashion_mnist.yaml`` and ``benchmarks/suites/fedpac_paper.yaml`` (``fedhet compare -c``).

Run from the repository root: ``python benchmarks/fedpac_qp.py --scale medium``. Writes
``benchmarks/results/fedpac_qp_<dataset>_<scale>.{csv,md}`` and ``fedpac_alpha_<dataset>_<scale>.png``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from _common import RESULTS_DIR, environment, quiet_trainer, write_table
from _fedpac_recipes import SCALES, federation, methods
from fedhet.callbacks import HeadMixing
from fedhet.functional import combination_weights


def qp_cost(sizes: list[int], repeats: int = 1) -> list[tuple[int, float]]:
    """Seconds of one server step (one QP per client) for synthetic statistics of ``m`` clients in 5 groups."""
    out = []
    for m in sizes:
        g = torch.Generator().manual_seed(m)
        centres = torch.randn(5, 10, 128, generator=g)
        h = centres[torch.arange(m) % 5] + 0.3 * torch.randn(m, 10, 128, generator=g)
        v = 0.05 + 0.01 * torch.rand(m, generator=g)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            combination_weights(h, v)
            best = min(best, time.perf_counter() - start)
        out.append((m, best))
    return out


def heatmap(weights: torch.Tensor, client_ids: list[str], path: Path, title: str) -> None:
    """The QP weight matrix with clients reordered by group (``i mod 5``), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = sorted(range(len(client_ids)), key=lambda i: (i % 5, i))
    w = weights[order][:, order].numpy()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    image = ax.imshow(w, cmap="viridis", vmin=0)
    labels = [f"{i}(g{i % 5})" for i in order]
    ax.set_xticks(range(len(order)), labels, rotation=90, fontsize=6)
    ax.set_yticks(range(len(order)), labels, fontsize=6)
    ax.set_xlabel("partner client j")
    ax.set_ylabel("client i")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def same_group_mass(weights: torch.Tensor) -> float:
    """Mean over clients of the weight on clients of the same group (``i mod 5``)."""
    m = weights.shape[0]
    groups = torch.arange(m) % 5
    return float((weights * (groups[:, None] == groups[None, :])).sum(1).mean())


def fedpac_weights(args: argparse.Namespace) -> tuple[torch.Tensor, list[str], float]:
    """One FedPAC run: its last round's QP weights, the client ids and the mean client test accuracy."""
    scale = SCALES[args.scale]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = quiet_trainer(args.rounds, args.seed, Path(tmp), local_epochs=args.local_epochs)
        model, data = methods(scale)["FedPAC"](), federation(scale, args.seed, args.clients)
        trainer.fit(model, data)
        accuracy = trainer.test(model, data)["test/acc_mean"]
    mixing = next(cb for cb in trainer.callbacks if isinstance(cb, HeadMixing))
    if mixing.weights is None:
        raise RuntimeError("FedPAC ran no head-mixing round; nothing to draw")
    return mixing.weights, list(mixing.client_ids), float(accuracy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="medium")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=None, help="default: the scale's")
    parser.add_argument("--local-epochs", type=int, default=None, help="default: the scale's")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--qp-sizes", type=int, nargs="+", default=[20, 100, 500])
    args = parser.parse_args()
    scale = SCALES[args.scale]
    args.rounds = args.rounds or scale["rounds"]
    args.local_epochs = args.local_epochs or scale["local_epochs"]
    tag = f"{scale['data']}_{args.scale}"

    weights, client_ids, accuracy = fedpac_weights(args)
    RESULTS_DIR.mkdir(exist_ok=True)
    png = RESULTS_DIR / f"fedpac_alpha_{tag}.png"
    heatmap(weights, client_ids, png, f"FedPAC QP weights, last round, seed {args.seed} ({scale['data']})")
    partners = float((weights > 0).sum(1).float().mean())
    rows = [
        {"clients": m, "seconds": f"{s:.3f}", "ms_per_qp": f"{1000 * s / m:.2f}"} for m, s in qp_cost(args.qp_sizes)
    ]
    notes = [
        f"One FedPAC run, the reproduction's `{args.scale}` recipe (`_fedpac_recipes.py`): {args.clients} clients of"
        f" {scale['data']} in the paper's partition (5 groups, client i in group i mod 5), {scale['network']} body,"
        f" body lr {scale['lr']}, head lr {scale['head_lr']}, {args.rounds} rounds x {args.local_epochs} local"
        f" epoch(s), seed {args.seed}; mean client test accuracy {100 * accuracy:.2f} %.",
        f"QP weights of the last round: `{png.name}`; mean weight on same-group clients {same_group_mass(weights):.3f}"
        f" (a group is 1/5 of the clients), mean own weight {float(weights.diagonal().mean()):.3f}, mean partners per"
        f" client {partners:.1f}.",
        "",
        "Server step (all QPs of a round; K = 10, d = 128, synthetic 5-group statistics), wall seconds:",
    ]
    config = (
        f"none: `_fedpac_recipes.py`'s `{args.scale}` recipe and synthetic QP statistics (above); no fedhet config or"
        " suite"
    )
    columns = {"clients": "clients", "seconds": "seconds", "ms_per_qp": "ms per QP"}
    print(write_table(f"fedpac_qp_{tag}", f"FedPAC's QP weights and server step ({args.scale} scale)", rows, columns,
                      notes, environment(seed=args.seed, config=config)))  # fmt: skip


if __name__ == "__main__":
    main()
