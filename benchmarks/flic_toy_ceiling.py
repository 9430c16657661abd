"""How much room FLIC's toys leave above the Local baseline: a per-client linear discriminant on the same data.

Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024 (the toys of
section 6 / appendix S3.1). In both toys the classes are Gaussians with one shared covariance in the base space, seen by
each client through its own feature map (a random linear map, or added noise features), so the Bayes classifier of a
client is linear in its own features. Two references per client, with scikit-learn's shrinkage LDA:

* ``LDA train -> test``: fitted on the client's training split, scored on its test split (what a client could reach
  alone with the right model family);
* ``LDA on test (in-sample)``: fitted and scored on the test split itself, an optimistic ceiling;
* ``Bayes (true parameters)``: the client's Bayes classifier from the generator's own class means and covariance
  mapped into the client's features (equal priors over its classes): no method can do better on average.

A federated method can only beat Local by more than the gap between Local and these references if the other clients'
data tell it something about this client's classes that its own data do not. The toys of
``benchmarks/suites/flic_toys.yaml`` (20 clients, the paper's pools of 2000 training / 1000 test samples per class),
data seeds 0..n-1 (the suite: data seed 0, a fifth of each client's training samples held out for validation).

Run from the repository root: ``python benchmarks/flic_toy_ceiling.py --seeds 3``. Writes
``benchmarks/results/<--tag>.{csv,md}`` (default ``flic_toy_ceiling``).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from _common import environment, write_table
from fedhet.datamodules import LinearMappingToy, NoisyFeaturesToy

TOYS = {"linear": LinearMappingToy, "noisy": NoisyFeaturesToy}


def bayes_accuracy(data: LinearMappingToy | NoisyFeaturesToy, client_id: str) -> float:
    """Test accuracy of a client's Bayes classifier, from the toy's true class means and unit covariance.

    In the base space class ``c`` is ``N(m_c, I)``; the client sees ``x A`` (linear toy, ``A`` its matrix) or ``[x,
    noise]`` (noisy toy, unit noise), so its class ``c`` is ``N(m_c A, A^T A)`` or ``N([m_c, 0], I)``: the classifier
    takes the nearest class mean of the client's classes in the Mahalanobis metric (pseudo-inverse when singular).
    """
    means = data.class_means.double().numpy()
    draw = data.feature_draws[client_id]
    if isinstance(draw, int):  # noisy toy: ``draw`` noise features appended
        means = np.hstack([means, np.zeros((len(means), draw))])
        precision = np.eye(means.shape[1])
    else:
        matrix = draw.double().numpy()
        means, precision = means @ matrix, np.linalg.pinv(matrix.T @ matrix)
    client = data.client(client_id)
    x, y = client.test_dataset.x.double().numpy(), client.test_dataset.y.numpy()
    classes = np.array(data.client_classes[client_id])
    diff = x[:, None, :] - means[classes][None, :, :]
    distance = np.einsum("ncd,de,nce->nc", diff, precision, diff)
    return float(np.mean(classes[distance.argmin(axis=1)] == y))


def client_scores(dataset: str, seed: int, args: argparse.Namespace) -> tuple[float, float, float]:
    """Mean over clients of the two LDA accuracies and the Bayes accuracy (%) for one toy and seed."""
    data = TOYS[dataset](
        num_clients=args.clients,
        samples_per_class=args.samples_per_class,
        test_samples_per_class=args.test_samples_per_class,
        batch_size=100,
        seed=seed,
    )
    data.setup("fit")
    held_out, in_sample, bayes = [], [], []
    for client_id in data.client_ids:
        client = data.client(client_id)
        x_train, y_train = client.train_dataset.x.numpy(), client.train_dataset.y.numpy()
        x_test, y_test = client.test_dataset.x.numpy(), client.test_dataset.y.numpy()
        lda = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")
        held_out.append(lda.fit(x_train, y_train).score(x_test, y_test))
        in_sample.append(lda.fit(x_test, y_test).score(x_test, y_test))
        bayes.append(bayes_accuracy(data, client_id))
    return 100 * statistics.mean(held_out), 100 * statistics.mean(in_sample), 100 * statistics.mean(bayes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--samples-per-class", type=int, default=2000)
    parser.add_argument("--test-samples-per-class", type=int, default=1000)
    parser.add_argument("--tag", default="flic_toy_ceiling", help="name of the results files")
    args = parser.parse_args()
    rows = []
    for dataset in TOYS:
        scores = [client_scores(dataset, seed, args) for seed in range(args.seeds)]
        for index, name in enumerate(("LDA train -> test", "LDA on test (in-sample)", "Bayes (true parameters)")):
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
        f" `benchmarks/suites/flic_toys.yaml` with {args.samples_per_class} training / {args.test_samples_per_class}"
        " test samples per class (its data seed 0 is seed 0 here; the suite holds out a fifth of the training samples"
        " for validation).",
    ]
    columns = {"dataset": "toy", "reference": "reference", "acc_mean": "accuracy", "acc_std": "± std", "seeds": "seeds"}
    title = "FLIC toys: per-client linear references"
    config = "benchmarks/suites/flic_toys.yaml (its toys and data seed); the references are fitted here"
    print(write_table(args.tag, title, rows, columns, notes, environment(config=config)))


if __name__ == "__main__":
    main()
