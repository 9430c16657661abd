"""How much room FLIC's toys leave above the Local baseline: a per-client linear discriminant on the same data.

Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024 (the toys of
section 6 / appendix S3.1). In both toys the classes are Gaussians with one shared covariance in the base space, seen by
each client through its own feature map (a random linear map, or added noise features), so the Bayes classifier of a
client is linear in its own features. Two references per client, with scikit-learn's shrinkage LDA:

* ``LDA train -> test``: fitted on the client's training split, scored on its test split (what a client could reach
  alone with the right model family);
* ``LDA on test (in-sample)``: fitted and scored on the test split itself, an optimistic ceiling.

A federated method can only beat Local by more than the gap between Local and these references if the other clients'
data tell it something about this client's classes that its own data do not. Same federations as
``flic_reproduce.py`` (20 clients, 500 training / 200 test samples per class, seeds 0..n-1).

Run from the repository root: ``python benchmarks/flic_toy_ceiling.py --seeds 3``. Writes
``benchmarks/results/flic_toy_ceiling.{csv,md}``.
"""

from __future__ import annotations

import argparse
import statistics

from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from _common import environment, write_table
from fedhet.datamodules import LinearMappingToy, NoisyFeaturesToy

TOYS = {"linear": LinearMappingToy, "noisy": NoisyFeaturesToy}


def client_scores(dataset: str, seed: int, args: argparse.Namespace) -> tuple[float, float]:
    """Mean over clients of the two LDA accuracies (%) for one toy and seed."""
    data = TOYS[dataset](
        num_clients=args.clients,
        samples_per_class=args.samples_per_class,
        test_samples_per_class=args.test_samples_per_class,
        batch_size=100,
        seed=seed,
    )
    data.setup("fit")
    held_out, in_sample = [], []
    for client_id in data.client_ids:
        client = data.client(client_id)
        x_train, y_train = client.train_dataset.x.numpy(), client.train_dataset.y.numpy()
        x_test, y_test = client.test_dataset.x.numpy(), client.test_dataset.y.numpy()
        lda = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")
        held_out.append(lda.fit(x_train, y_train).score(x_test, y_test))
        in_sample.append(lda.fit(x_test, y_test).score(x_test, y_test))
    return 100 * statistics.mean(held_out), 100 * statistics.mean(in_sample)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--samples-per-class", type=int, default=500)
    parser.add_argument("--test-samples-per-class", type=int, default=200)
    args = parser.parse_args()
    rows = []
    for dataset in TOYS:
        scores = [client_scores(dataset, seed, args) for seed in range(args.seeds)]
        for index, name in enumerate(("LDA train -> test", "LDA on test (in-sample)")):
            values = [s[index] for s in scores]
            rows.append(
                {
                    "dataset": dataset,
                    "reference": name,
                    "acc_mean": f"{statistics.mean(values):.2f}",
                    "acc_std": f"{statistics.stdev(values):.2f}" if len(values) > 1 else "0.00",
                    "seeds": len(values),
                }
            )
    notes = [
        f"Mean client test accuracy (%) over {args.clients} clients, ± std over {args.seeds} seeds; the toys of"
        " `flic_reproduce.py` (Local and FLIC on the same federations are in `flic_toys.md`).",
    ]
    columns = {"dataset": "toy", "reference": "reference", "acc_mean": "accuracy", "acc_std": "± std", "seeds": "seeds"}
    title = "FLIC toys: per-client linear references"
    print(write_table("flic_toy_ceiling", title, rows, columns, notes, environment()))


if __name__ == "__main__":
    main()
