import pytest
import torch

from fedhet.functional import stack_padded, stack_states, unstack_states


def test_stack_then_unstack_gives_each_client_its_tensors():
    gen = torch.Generator().manual_seed(0)
    states = [{"w": torch.randn(3, 2, generator=gen), "b": torch.randn(2, generator=gen)} for _ in range(4)]
    stacked = stack_states(states)
    assert {name: tuple(t.shape) for name, t in stacked.items()} == {"w": (4, 3, 2), "b": (4, 2)}
    for mine, theirs in zip(unstack_states(stacked), states, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_states_with_other_names_are_refused():
    with pytest.raises(ValueError, match=r"state 1 holds names \['v'\], state 0 holds \['w'\]"):
        stack_states([{"w": torch.zeros(1)}, {"v": torch.zeros(1)}])
    with pytest.raises(ValueError, match="at least one"):
        stack_states([])
    with pytest.raises(ValueError, match=r"different numbers of clients: \[2, 3\]"):
        unstack_states({"w": torch.zeros(2, 1), "b": torch.zeros(3)})


def test_stack_padded_pads_with_zero_rows_and_masks_them():
    x = [torch.randn(n, 2, 3) for n in (4, 1, 3)]
    y = [torch.arange(n) + 1 for n in (4, 1, 3)]
    (xs, ys), mask = stack_padded(list(zip(x, y, strict=True)))
    assert xs.shape == (3, 4, 2, 3)
    assert mask.tolist() == [[True] * 4, [True, False, False, False], [True, True, True, False]]
    for k in range(3):
        torch.testing.assert_close(xs[k][mask[k]], x[k], rtol=0, atol=0)
        assert ys[k][mask[k]].tolist() == y[k].tolist()
        assert not xs[k][~mask[k]].any()
        assert not ys[k][~mask[k]].any()


def test_stack_padded_of_equal_batches_is_their_stack_with_a_full_mask():
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(3, 2, generator=gen), torch.arange(3) + k) for k in range(4)]
    (xs, ys), mask = stack_padded(batches)
    assert torch.equal(xs, torch.stack([x for x, _ in batches]))
    assert xs.stride() == (6, 2, 1)
    assert torch.equal(ys, torch.stack([y for _, y in batches]))
    assert mask.dtype == torch.bool
    assert mask.shape == (4, 3)
    assert bool(mask.all())
