"""``fedhet fit|validate|test -c configs/<method>/<dataset>.yaml``: LightningCLI driving the FederatedTrainer."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, cast

import yaml
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, _InstantiatorFn

from fedhet.datamodules.federated import FederatedDataModule
from fedhet.modules.base import FederatedModule
from fedhet.plugins.run_folder import config_root, latest_checkpoint
from fedhet.plugins.trainer import FederatedTrainer


def _import_class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class _TopLevelHyperparameters(_InstantiatorFn):
    """Lightning's instantiator, giving the config's hyperparameters only to the class the config names at ``key``.

    Lightning hands the ``data`` (or ``model``) config's arguments to *every* datamodule (module) built while that
    section is instantiated, so a federation nested in another (``AlignedFederation(federation=HeartFederation(...))``)
    would save its outer federation's arguments as its own. Nested classes are built plainly here.
    """

    def __call__(self, class_type: type, *args: Any, applied_instantiation_links: dict, **kwargs: Any) -> Any:
        config = self.cli._get(self.cli.config, self.key, default=None) or {}
        class_path = config.get("class_path") if hasattr(config, "get") else None
        if class_path is not None and _import_class(class_path) is not class_type:
            return class_type(*args, **kwargs)
        return super().__call__(class_type, *args, applied_instantiation_links=applied_instantiation_links, **kwargs)


class FederatedCLI(LightningCLI):
    """A LightningCLI whose ``trainer`` is a :class:`~fedhet.plugins.FederatedTrainer`.

    ``model`` is any :class:`~fedhet.modules.FederatedModule` subclass and ``data`` any
    :class:`~fedhet.datamodules.FederatedDataModule` subclass, chosen by ``class_path`` in the config; every trainer
    knob (``trainer.rounds``, ``trainer.sampler``, ``trainer.logger``...) is an option. Unknown keys and wrong types
    are refused before any data is read. The resolved config is saved beside the run's logs.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("model_class", FederatedModule)
        kwargs.setdefault("datamodule_class", FederatedDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        super().__init__(
            trainer_class=FederatedTrainer,  # type: ignore[arg-type]
            save_config_callback=None,
            seed_everything_default=False,
            auto_configure_optimizers=False,
            **kwargs,
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Lightning's parser with argparse's prefix matching off: ``--trainer.round 2`` is an error, not ``rounds``."""
        kwargs.setdefault("allow_abbrev", False)
        return super().init_parser(**kwargs)

    def before_fit(self) -> None:
        """Run the runs the module needs first (e.g. FedDaDiL's step 1) when their folders hold no checkpoint yet."""
        for config in getattr(self.model, "required_runs", list)():
            root = config_root(config)
            if latest_checkpoint(root) is None:
                print(f"fedhet: {config} has no checkpoint under {root} yet: running it first", flush=True)
                FederatedCLI(args=["fit", "-c", str(config)])

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit``, ``validate``, ``test``, ``export`` (clients as Lightning checkpoints); model and data: config."""
        return {name: {"model", "datamodule"} for name in ("fit", "validate", "test", "export")}

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the FederatedTrainer's arguments (it is not a ``lightning.Trainer``), then model and data."""
        parser.add_class_arguments(FederatedTrainer, "trainer", instantiate=False, fail_untyped=False, sub_configs=True)
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data)

    def _add_instantiators(self) -> None:
        for key, base, subclasses in (
            ("model", self._model_class, self.subclass_mode_model),
            ("data", self._datamodule_class, self.subclass_mode_data),
        ):
            self.parser.add_instantiator(_TopLevelHyperparameters(cli=self, key=key), base, subclasses=subclasses)

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a value they refuse (``rounds: 0``...) ends like a parse error, exit 2.

        A sampler that needs more clients per round than the federation declares (``min_clients`` above
        ``data.num_clients``) is refused here too, before any data is read; where the count is only known from the
        data, the trainer refuses it when ``fit`` starts, before any round runs.
        """
        try:
            super().instantiate_classes()
            num_clients = self.datamodule.declared_num_clients
            if num_clients is not None:
                cast(FederatedTrainer, self.trainer).sampler.validate(num_clients)
        except ValueError as err:
            self._parser(self.subcommand).error(str(err))

    def instantiate_trainer(self, **kwargs: Any) -> FederatedTrainer:  # type: ignore[override]
        """Build the FederatedTrainer and hand it the resolved config to save and log.

        As in LightningCLI, ``trainer_defaults`` (``callbacks`` among them, kept in every run) override the trainer's
        defaults, and callbacks added to the parser with ``add_lightning_class_args`` join ``trainer.callbacks``.
        """
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        extra = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        persistent = self.trainer_defaults.get("callbacks") or []
        persistent = list(persistent) if isinstance(persistent, (list, tuple)) else [persistent]
        if extra or persistent:
            given = config.get("callbacks") or []
            config["callbacks"] = [*(given if isinstance(given, (list, tuple)) else [given]), *extra, *persistent]
        trainer = FederatedTrainer(**config)
        dumped = self._parser(self.subcommand).dump(
            self.config.get(str(self.subcommand), self.config), skip_none=False, format="yaml"
        )
        trainer.run_config = yaml.safe_load(dumped)
        return trainer


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``fedhet`` console script.

    A data or setup error (a missing data file, nothing trained yet for ``test``, a checkpoint that does not match)
    ends the command with one line on standard error and exit status 1, as a parse error does (status 2); the
    traceback is shown with ``--debug`` (anywhere on the command line) or ``FEDHET_DEBUG=1``.
    """
    argv = list(sys.argv[1:] if args is None else args)
    debug = "--debug" in argv or os.environ.get("FEDHET_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    if args is None:  # Lightning reads the command line itself (and warns when given both)
        sys.argv[1:] = argv
    try:
        FederatedCLI(args=None if args is None else argv)
    except Exception as err:
        if debug:
            raise
        message = str(err).strip() or type(err).__name__
        sys.exit(f"fedhet: error: {message}\n(--debug or FEDHET_DEBUG=1 shows the traceback)")


if __name__ == "__main__":
    main()
