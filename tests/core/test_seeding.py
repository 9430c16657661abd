"""Seeded blocks: each seeds the generators; the state is restored after it, or once after an enclosing block."""

import pytest
import torch

from fedhet.core import derive_seed, rng_preserved, seeded
from fedhet.core.seeding import generator_states, set_generator_states


def test_seeded_draws_depend_on_the_seed_only_and_restore_the_generator():
    torch.manual_seed(123)
    expected_after = torch.rand(3)
    torch.manual_seed(123)
    with seeded(7):
        inside = torch.rand(4)
    torch.manual_seed(999)
    with seeded(7):
        again = torch.rand(4)
    torch.manual_seed(123)
    with seeded(8):
        torch.rand(10)
    assert torch.equal(inside, again)
    assert torch.equal(torch.rand(3), expected_after)  # the block left the outer stream where it was


def test_seeded_inside_rng_preserved_seeds_each_block_and_restores_once_at_the_end():
    torch.manual_seed(5)
    expected_after = torch.rand(3)
    with seeded(1):
        first_alone = torch.rand(4)
    with seeded(2):
        second_alone = torch.rand(4)
    torch.manual_seed(5)
    with rng_preserved():
        with seeded(1):
            first = torch.rand(4)
        between = torch.rand(2)  # not restored yet: the stream goes on from the first block's draws
        with seeded(2):
            second = torch.rand(4)
    assert torch.equal(first, first_alone)
    assert torch.equal(second, second_alone)
    with seeded(1):
        torch.rand(4)
        assert torch.equal(torch.rand(2), between)
    assert torch.equal(torch.rand(3), expected_after)  # restored once, after the enclosing block


def test_rng_preserved_restores_on_an_error():
    torch.manual_seed(11)
    expected = torch.rand(2)
    torch.manual_seed(11)
    with pytest.raises(RuntimeError), rng_preserved(), seeded(3):
        raise RuntimeError("client failed")
    assert torch.equal(torch.rand(2), expected)


def test_derive_seed_is_63_bit_and_key_dependent():
    seeds = {derive_seed(0, "fit", r, c) for r in range(3) for c in ("a", "b")}
    assert len(seeds) == 6
    assert all(0 <= s < 2**63 for s in seeds)


def test_generator_states_put_back_continue_the_stream_where_it_was_taken():
    torch.manual_seed(21)
    torch.rand(3)
    states = generator_states([torch.device("cpu")])
    expected = torch.rand(5)
    torch.manual_seed(99)
    set_generator_states(states, [torch.device("cpu")])
    assert torch.equal(torch.rand(5), expected)
