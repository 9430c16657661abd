"""FLIC's anchor terms over a presence mask of all classes equal the terms over the batch's unique classes."""

import torch
import torch.nn.functional as F
from torch.func import vmap

from fedhet.functional import (
    anchor_sample_ce,
    class_moments,
    draws_by_class,
    evaluated_classes,
    gaussian_samples,
    gaussian_w2_sq,
    present_classes,
    present_w2_sq,
)


def batch(seed, n=10, k=3, classes=(0, 2)):
    gen = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=gen)]
    return torch.randn(n, k, generator=gen), y


def test_presence_mask_w2_equals_the_sum_over_unique_classes():
    z, y = batch(0)
    anchors = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    present, index = torch.unique(y, return_inverse=True)
    _, means, covs = class_moments(z, index, len(present))
    expected = gaussian_w2_sq(anchors[present], None, means, covs).sum()
    counts, all_means, all_covs = class_moments(z, y, 4)
    torch.testing.assert_close(present_w2_sq(anchors, None, counts, all_means, all_covs), expected)
    classes, positions = evaluated_classes(y, 4)  # the batch's own classes, their moments only
    assert classes.tolist() == [0, 2]
    own = present_w2_sq(anchors[classes], None, *class_moments(z, positions, len(classes)))
    torch.testing.assert_close(own, expected)


def test_padding_rows_left_out_by_the_mask_change_nothing():
    z, y = batch(2, n=7, classes=(1, 2))
    padded_z, padded_y = torch.cat([z, torch.zeros(3, 3)]), torch.cat([y, torch.zeros(3, dtype=torch.long)])
    mask = torch.arange(10) < 7
    for mine, theirs in zip(class_moments(padded_z, padded_y, 4, mask), class_moments(z, y, 4), strict=True):
        torch.testing.assert_close(mine, theirs)
    assert present_classes(padded_y, 4, mask).tolist() == [False, True, True, False]  # class 0 only pads
    assert present_classes(padded_y, 4).tolist() == [True, True, True, False]


def test_anchor_sample_ce_is_the_per_class_mean_summed_over_present_classes():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 4, 4, generator=gen)  # J = 5 draws of each of C = 4 classes
    present = torch.tensor([True, False, True, True])
    counted = torch.tensor([True, True, True, False, False])
    expected = sum(F.cross_entropy(logits[:3, c], torch.full((3,), c)) for c in (0, 2, 3))
    torch.testing.assert_close(anchor_sample_ce(logits, torch.arange(4), present, counted), expected)
    classes = torch.tensor([0, 2, 3])  # the present classes alone, gathered: the same term
    gathered = anchor_sample_ce(logits[:, classes], classes, torch.ones(3, dtype=torch.bool), counted)
    torch.testing.assert_close(gathered, expected)


def test_draws_made_class_by_class_are_placed_per_class():
    draws = torch.randn(6, 2, generator=torch.Generator().manual_seed(9))  # J = 3 draws of classes 1 then 3
    placed = draws_by_class(draws, torch.tensor([1, 3]), 5)
    assert placed.shape == (3, 5, 2)
    torch.testing.assert_close(placed[:, 1], draws[:3])
    torch.testing.assert_close(placed[:, 3], draws[3:])
    assert not placed[:, [0, 2, 4]].any()


def test_padded_batches_evaluate_every_class():
    y = torch.tensor([3, 1, 1, 0])
    classes, positions = evaluated_classes(y, 5)
    assert classes.tolist() == [0, 1, 3]
    assert torch.equal(classes[positions], y)
    classes, positions = evaluated_classes(y, 5, torch.tensor([True, True, True, False]))
    assert classes.tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(positions, y)


def test_gaussian_samples_scale_or_factors():
    noise = torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(4))
    means = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(gaussian_samples(means, None, noise, 2.0), means + 2.0 * noise)
    factors = torch.stack([torch.eye(3) * 2.0, torch.eye(3) * 2.0])
    torch.testing.assert_close(gaussian_samples(means, factors, noise), means + 2.0 * noise)


def test_the_masked_terms_run_under_vmap_as_client_by_client():
    clients = [batch(seed, classes=classes) for seed, classes in ((5, (0, 1)), (6, (2,)), (7, (0, 1, 2, 3)))]
    z, y = torch.stack([c[0] for c in clients]), torch.stack([c[1] for c in clients])
    mask = torch.ones(3, 10, dtype=torch.bool).index_fill_(1, torch.tensor([8, 9]), False)
    anchors = torch.randn(4, 3, generator=torch.Generator().manual_seed(8))

    def w2(z, y, mask):
        return present_w2_sq(anchors, None, *class_moments(z, y, 4, mask))

    one_by_one = torch.stack([w2(z[k], y[k], mask[k]) for k in range(3)])
    torch.testing.assert_close(vmap(w2)(z, y, mask), one_by_one)
