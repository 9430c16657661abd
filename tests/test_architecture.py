"""The engine's typed surface: the trainer is what callbacks are typed against, and hooks keep one signature."""

import importlib
import inspect
import pkgutil

import fedhet.callbacks
import fedhet.modules
from fedhet.callbacks import FederatedCallback
from fedhet.core import Federation, FederationHooks
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer, Processes, Reporting


def test_the_trainer_is_the_federation_callbacks_are_typed_against(tmp_path, tiny_federation):
    trainer = FederatedTrainer(
        rounds=1,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(FedAvg(hidden_dims=[4]), tiny_federation)
    assert isinstance(trainer, Federation)
    assert trainer.context.client_ids == tiny_federation.client_ids


def all_subclasses(cls):
    return {sub for direct in cls.__subclasses__() for sub in (direct, *all_subclasses(direct))}


def test_every_shipped_callback_hook_takes_the_typed_hooks_arguments():
    for package in (fedhet.callbacks, fedhet.modules):  # modules define callbacks too, e.g. Global Layers
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            importlib.import_module(info.name)
    hooks = [name for name in vars(FederationHooks) if name.startswith("on_")]
    assert len(hooks) == 9
    shipped = [cls for cls in all_subclasses(FederatedCallback) if cls.__module__.startswith("fedhet.")]
    assert len(shipped) >= 7
    for callback in shipped:
        for name in hooks:
            mine = inspect.signature(getattr(callback, name)).parameters
            declared = inspect.signature(getattr(FederationHooks, name)).parameters
            assert set(mine) <= set(declared), f"{callback.__name__}.{name} takes {sorted(set(mine) - set(declared))}"


def test_the_dashboard_and_its_figures_import_no_method():
    """Method pictures live in the methods' callbacks files; the dashboard asks callbacks for them."""
    import ast
    from pathlib import Path

    import fedhet.callbacks

    folder = Path(fedhet.callbacks.__file__).parent
    methods = {f"fedhet.callbacks.{name}" for name in ("flic", "fedpac", "hyfem", "feddadil", "fedhenn")}
    for name in ("dashboard.py", "figures.py"):
        tree = ast.parse((folder / name).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert not {m for m in imported if m and m.startswith("fedhet.modules")}, name
        assert not imported & methods, f"{name} imports {sorted(imported & methods)}"


def test_the_trainer_asks_its_policies_and_inspects_none():
    """No isinstance on a runner, sampler, server update, aggregator or privacy class in the round loop."""
    import ast
    from pathlib import Path

    import fedhet.plugins
    import fedhet.plugins.rounds.engine
    import fedhet.plugins.rounds.trainer

    policies = {name for name in fedhet.plugins.__all__ if name != "FederatedTrainer"}
    trees = [
        ast.parse(Path(m.__file__).read_text()) for m in (fedhet.plugins.rounds.trainer, fedhet.plugins.rounds.engine)
    ]
    inspected = [
        ast.unparse(node)
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
        if {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & policies
    ]
    assert inspected == []
