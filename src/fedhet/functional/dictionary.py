r"""Dataset dictionary learning in Wasserstein space (DaDiL): atoms, the reconstruction loss and target labelling.

A dictionary is :math:`K` labelled atoms :math:`P_k = (Z_k, Y_k)` of :math:`n` points each; a client's dataset
:math:`Q_\ell` is modelled by the barycenter :math:`B(\alpha_\ell; P)` for its coordinates :math:`\alpha_\ell \in
\Delta_K`. The loss of a client is the transport cost between a mini-batch of its data and the barycenter of equally
sized atom mini-batches; an unlabelled client uses features only. A target client is labelled either from the
barycenter of the full atoms (DaDiL-R) or by a mixture of per-atom classifiers weighted by its coordinates (DaDiL-E).

References: E. F. Montesuma, F. Espinoza Castellon, F. N. Mboula, A. Mayoue, A. Souloumiac, C. Gouy-Pailler,
"Dataset Dictionary Learning in a Wasserstein Space for Federated Domain Adaptation", 2024 (eqs. 7, 10-14, §3.4);
E. F. Montesuma, F. N. Mboula, A. Souloumiac, "Learning New Representations of Domains with Dataset Dictionary
Learning in Wasserstein Space", ECAI 2023.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.functional.wasserstein import Solver, wasserstein_barycenter, wasserstein_cost


def init_dictionary(
    num_atoms: int, num_points: int, dim: int, num_classes: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    r"""Initial atoms: standard normal features and one-hot, class-balanced labels (class of point ``i``: ``i mod c``).

    Args:
        num_atoms: :math:`K`.
        num_points: :math:`n` points per atom.
        dim: feature dimension :math:`d`.
        num_classes: :math:`c`.
        generator: random source of the features.

    Returns:
        ``(Z, Y)`` of shapes ``(K, n, d)`` and ``(K, n, c)``.

    Example:
        >>> z, y = init_dictionary(2, 6, 4, 3)
        >>> tuple(z.shape), y.sum(1).tolist()
        ((2, 6, 4), [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]])

    """
    z = torch.randn(num_atoms, num_points, dim, generator=generator)
    y = F.one_hot(torch.arange(num_points) % num_classes, num_classes).float().expand(num_atoms, -1, -1)
    return z, y.clone()


def atom_batches(num_points: int, batch_size: int, device: torch.device | str | None = None) -> list[Tensor]:
    r"""The paper's atom mini-batches: ``ceil(n / n_b)`` contiguous index ranges ``[b n_b, (b + 1) n_b)`` (Alg. 2).

    Every atom is cut at the same indices, so the :math:`b`-th mini-batch of all atoms is one aligned slice; the last
    one is shorter when ``n`` is not a multiple of ``n_b``. With the initial labels of :func:`init_dictionary` (class
    of point ``i``: ``i mod c``) and ``n_b`` a multiple of ``c``, every batch holds ``n_b / c`` points of each class.

    Args:
        num_points: :math:`n`, points per atom.
        batch_size: :math:`n_b`.
        device: device of the index tensors.

    Returns:
        the index tensors, one per mini-batch, in order.

    Example:
        >>> [b.tolist() for b in atom_batches(5, 2)]
        [[0, 1], [2, 3], [4]]

    """
    if num_points < 1 or batch_size < 1:
        raise ValueError(f"atom_batches: num_points and batch_size must be positive, got {num_points}, {batch_size}")
    indices = torch.arange(num_points, device=device)
    return list(indices.split(batch_size))


def class_balanced_indices(
    labels: Tensor, num_classes: int, per_class: int, generator: torch.Generator | None = None
) -> Tensor:
    """Row indices of a class-balanced mini-batch: ``per_class`` rows of every present class, drawn with replacement.

    Args:
        labels: integer labels, shape ``(N,)``.
        num_classes: size of the label space.
        per_class: rows drawn per class present in ``labels``.
        generator: random source.

    Returns:
        shape ``(per_class * classes present,)``, grouped by class.

    Example:
        >>> rows = class_balanced_indices(torch.tensor([0, 0, 0, 1]), 3, per_class=4)
        >>> torch.tensor([0, 0, 0, 1])[rows].bincount().tolist()
        [4, 4]

    """
    picked = []
    for c in range(num_classes):
        rows = torch.nonzero(labels == c).flatten()
        if len(rows):
            draw = torch.randint(len(rows), (per_class,), generator=generator).to(rows.device)
            picked.append(rows[draw])
    return torch.cat(picked)


def dictionary_loss(
    z: Tensor,
    atoms_z: Tensor,
    atoms_y: Tensor,
    alpha: Tensor,
    y: Tensor | None = None,
    n_iter: int = 10,
    tol: float = 1e-9,
    beta: float | None = None,
    solver: Solver = "emd",
    reg: float = 0.05,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A client's reconstruction loss :math:`T(\hat Q_\ell, B(\alpha_\ell; P))` on mini-batches (eqs. 10-11).

    The barycenter of the (mini-batched) labelled atoms has as many points as ``z``; the loss is the labelled cost
    :math:`T_c` when ``y`` is given (a source client) and the feature-only :math:`T_2` otherwise (the target, whose
    loss gives the atoms' labels no gradient). Plans are constants; the loss is differentiable in the atoms and in
    :math:`\alpha`.

    Args:
        z: the client's features, shape ``(b, d)``.
        atoms_z: atom features, shape ``(K, m, d)``.
        atoms_y: atom soft labels, shape ``(K, m, c)``.
        alpha: barycentric coordinates, shape ``(K,)``.
        y: the client's soft (or one-hot) labels, shape ``(b, c)``; ``None`` for an unlabelled client.
        n_iter: barycenter iterations.
        tol: barycenter tolerance.
        beta: label weight (``None``: adaptive).
        solver: ``"emd"`` or ``"sinkhorn"``.
        reg: Sinkhorn regularisation.
        generator: random source of the barycenter's initial support.

    Returns:
        a scalar.

    """
    support_z, support_y = wasserstein_barycenter(
        atoms_z, alpha, atoms_y, len(z), n_iter=n_iter, tol=tol, beta=beta, solver=solver, reg=reg, generator=generator
    )
    if y is None:
        return wasserstein_cost(z, support_z, solver=solver, reg=reg)
    return wasserstein_cost(z, support_z, y, support_y, beta, solver, reg)


def fit_softmax_regression(
    z: Tensor, y: Tensor, weight_decay: float = 1e-3, max_iter: int = 200
) -> tuple[Tensor, Tensor]:
    r"""Multinomial logistic regression on soft labels: :math:`\min_{W,b} \mathrm{CE}(zW^\top + b, y) + \lambda\|W\|^2`.

    The classifier family of DaDiL-E and DaDiL-R (a linear softmax head, like the step-1 classifier), fitted to
    convergence with L-BFGS on standardised features; the returned layer applies to raw features.

    Args:
        z: features, shape ``(n, d)``.
        y: soft labels, shape ``(n, c)`` (rows in the simplex).
        weight_decay: :math:`\lambda`.
        max_iter: L-BFGS iterations.

    Returns:
        ``(weight, bias)`` of shapes ``(c, d)`` and ``(c,)``.

    Example:
        >>> z = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]])
        >>> w, b = fit_softmax_regression(z, F.one_hot(torch.tensor([0, 0, 1, 1])).float())
        >>> (z @ w.T + b).argmax(1).tolist()
        [0, 0, 1, 1]

    """
    with torch.inference_mode(False), torch.enable_grad():  # also when called from an evaluation loop
        z, y = z.detach().clone(), y.detach().clone()
        mean, std = z.mean(0), z.std(0, unbiased=False).clamp_min(1e-6)
        x = (z - mean) / std
        weight = torch.zeros(y.shape[1], z.shape[1], dtype=z.dtype, device=z.device, requires_grad=True)
        bias = torch.zeros(y.shape[1], dtype=z.dtype, device=z.device, requires_grad=True)
        optimizer = torch.optim.LBFGS([weight, bias], max_iter=max_iter, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(x @ weight.T + bias, y) + weight_decay * weight.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
    weight, bias = weight.detach() / std, bias.detach()
    return weight, bias - weight @ mean


def ensemble_probabilities(z: Tensor, weights: Tensor, biases: Tensor, alpha: Tensor) -> Tensor:
    r"""DaDiL-E's prediction :math:`h_E(z) = \sum_k \alpha_k \mathrm{softmax}(W_k z + b_k)` (a point in the simplex).

    Args:
        z: features, shape ``(n, d)``.
        weights: one linear classifier per atom, shape ``(K, c, d)``.
        biases: shape ``(K, c)``.
        alpha: coordinates, shape ``(K,)``.

    Returns:
        class probabilities, shape ``(n, c)``.

    """
    probabilities = torch.softmax(torch.einsum("nd,kcd->knc", z, weights) + biases[:, None], dim=-1)
    return torch.einsum("k,knc->nc", alpha, probabilities)
