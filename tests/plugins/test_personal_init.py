"""Initial personal layers: one shared initialisation per architecture by default, per-client draws as an option."""

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, FedRep, GlobalLayers, LocalOnly
from fedhet.plugins import ClientStates, FederatedTrainer, Processes, Reporting
from tests.conftest import make_client
from tests.trainer_options import trainer_options


class InitialState(FederatedCallback):
    """Each client's module state when it first starts local training (before any step)."""

    def __init__(self):
        self.state = {}

    def on_client_fit_start(self, client_id, module):
        self.state.setdefault(client_id, {k: v.detach().clone() for k, v in module.state_dict().items()})


def fit_first_round(tmp_path, module, federation, **kwargs):
    rec = InitialState()
    trainer = FederatedTrainer(
        **trainer_options(
            rounds=1,
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            default_root_dir=str(tmp_path),
            callbacks=[rec],
            **kwargs,
        )
    )
    trainer.fit(module, federation)
    return rec.state


def equal_states(x, y):
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("module", [LocalOnly(hidden_dims=[8]), FedRep(hidden_dims=[8])], ids=["local", "fedrep"])
def test_clients_of_one_architecture_start_identical_by_default(tmp_path, tiny_federation, module):
    state = fit_first_round(tmp_path, module, tiny_federation)
    for cid in "bcd":
        assert equal_states(state["a"], state[cid]), cid


def test_per_client_option_draws_each_clients_personal_layers(tmp_path, tiny_federation):
    state = fit_first_round(tmp_path, FedRep(hidden_dims=[8]), tiny_federation, personal_init="per_client")
    assert not torch.equal(state["a"]["head.weight"], state["b"]["head.weight"])
    torch.testing.assert_close(state["a"]["body.1.weight"], state["b"]["body.1.weight"])  # shared layers: the server's


def test_shared_initialisation_follows_the_seed(tmp_path, tiny_federation):
    first = fit_first_round(tmp_path / "0", LocalOnly(hidden_dims=[8]), tiny_federation, seed=0)
    again = fit_first_round(tmp_path / "1", LocalOnly(hidden_dims=[8]), tiny_federation, seed=0)
    other = fit_first_round(tmp_path / "2", LocalOnly(hidden_dims=[8]), tiny_federation, seed=1)
    assert equal_states(first["a"], again["a"])
    assert not torch.equal(first["a"]["head.weight"], other["a"]["head.weight"])


def test_clients_with_different_input_dims_build_and_share_per_architecture(tmp_path):
    federation = FederatedDataModule(
        [
            make_client("a6", 24, 0, dim=6),
            make_client("b4", 24, 1, dim=4),
            make_client("c6", 24, 2, dim=6),
        ]
    )
    module = GlobalLayers(embed_dim=4, num_heads=2, num_blocks=1, width=8)
    state = fit_first_round(tmp_path, module, federation)
    assert equal_states(state["a6"], state["c6"])
    assert state["b4"]["embedding.weight"].shape != state["a6"]["embedding.weight"].shape


def test_unknown_personal_init_is_refused():
    with pytest.raises(ValueError, match="personal_init"):
        FederatedTrainer(client_state=ClientStates(personal_init="random"))


@pytest.mark.parametrize("personal_init", ["shared", "per_architecture"])
def test_clients_whose_inputs_differ_start_from_one_template_head(tmp_path, personal_init):
    # FLIC's clients hold inputs of different sizes: their embeddings differ in shape, their heads do not; the reference
    # code builds every client from one template model, so "shared" starts every head from the first build's
    federation = FederatedDataModule([make_client("a6", 24, 0, dim=6), make_client("b4", 24, 1, dim=4)])
    module = FLIC(latent_dim=4, hidden_width=8, embedding_hidden_dims=(8,))
    state = fit_first_round(tmp_path, module, federation, personal_init=personal_init)
    same_shape = [n for n in state["a6"] if n in state["b4"] and state["a6"][n].shape == state["b4"][n].shape]
    differs = [n for n in state["a6"] if n in state["b4"] and state["a6"][n].shape != state["b4"][n].shape]
    assert differs  # the input layers
    heads = [n for n in same_shape if "head" in n]
    assert heads
    equal = [torch.equal(state["a6"][n], state["b4"][n]) for n in heads]
    assert all(equal) if personal_init == "shared" else not any(equal)
