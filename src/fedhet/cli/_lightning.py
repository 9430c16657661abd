"""``fedhet fit|validate|test|export -c configs/<method>/<dataset>.yaml``: LightningCLI driving the FederatedTrainer.

Imported by :func:`fedhet.cli.main` only for these commands (Lightning and the engine load with it); its public names
are read from :mod:`fedhet.cli`.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import sys
from argparse import Action
from pathlib import Path
from typing import Any, NoReturn, cast

import yaml
from jsonargparse import DefaultHelpFormatter, Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, _InstantiatorFn

from fedhet.cli_text import COMMANDS, DESCRIPTION, error_sentence, plain_text
from fedhet.datamodules.federated import FederatedDataModule
from fedhet.modules.base import FederatedModule
from fedhet.plugins import FederatedTrainer, Reporting
from fedhet.plugins.processes.threads import pin_threads
from fedhet.plugins.rounds.epochs import epoch_schedule
from fedhet.plugins.storage.run_folder import config_root
from fedhet.plugins.storage.versions import latest_checkpoint

_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader, libyaml's when PyYAML was built with it."""
_DEFAULT_ROUNDS = inspect.signature(FederatedTrainer).parameters["rounds"].default

SUBCOMMANDS = {name: {"model", "datamodule"} for name in COMMANDS if name != "compare"}
"""The LightningCLI subcommands (every ``fedhet`` command but ``compare``) and the arguments their configs give."""


def _import_class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _subcommand_section(config: Namespace, subcommand: str | None) -> Any:
    """The part of ``config`` that holds ``model``, ``data`` and ``trainer``: the subcommand's, if there is one."""
    return config.get(str(subcommand), config) if subcommand is not None else config


class PlainHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter, showing the docstrings it quotes without their reST markup.

    ``:class:`~fedhet.plugins.FederatedTrainer``` reads ``FederatedTrainer``, ````rounds```` reads ``rounds``;
    see :func:`fedhet.cli_text.plain_text`.
    """

    def start_section(self, heading: str | None) -> None:
        """A group's title (a class's first docstring line), as plain text."""
        super().start_section(None if heading is None else plain_text(heading))

    def add_text(self, text: str | None) -> None:
        """A parser's description (a method's or class's docstring), as plain text."""
        super().add_text(None if text is None else plain_text(text))

    def _get_help_string(self, action: Action) -> str:  # argparse's hook for an option's help
        return plain_text(super()._get_help_string(action))


class FederatedArgumentParser(LightningArgumentParser):
    """Lightning's parser, whose usage errors are one line led by the sentence that matters.

    ``fedhet fit: error: model.init_args.lr: expected a float, got 'abc'``, then a hint; jsonargparse's full report
    (the usage, every type tried) with ``full_errors=True`` (``fedhet ... --debug``).

    Args:
        *args: as for :class:`~lightning.pytorch.cli.LightningArgumentParser`.
        full_errors: whether errors are reported in full, as jsonargparse reports them.
        **kwargs: as for :class:`~lightning.pytorch.cli.LightningArgumentParser`.

    """

    def __init__(self, *args: Any, full_errors: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, **kwargs)
        self.full_errors = full_errors

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """Write ``<prog>: error: <sentence>`` and a hint to standard error, and exit with status 2.

        A parser that raises its errors (``exit_on_error=False``) or reports them in full does as jsonargparse does.
        """
        if self.full_errors or not self.exit_on_error:
            super().error(message, ex)
        prog = (getattr(ex, "subcommand_parser", None) or self).prog.replace(" [options]", "")
        sys.stderr.write(
            f"{prog}: error: {error_sentence(message)}\n"
            f"({prog} --help lists the options; --debug or FEDHET_DEBUG=1 shows the whole error)\n"
        )
        self.exit(2)


class _TopLevelHyperparameters(_InstantiatorFn):
    """Lightning's instantiator, giving the config's hyperparameters only to the class the config names at ``key``.

    Lightning hands the ``data`` (or ``model``) config's arguments to *every* datamodule (module) built while that
    section is instantiated, so a federation nested in another (``AlignedFederation(federation=HeartFederation(...))``)
    would save its outer federation's arguments as its own. Nested classes are built plainly here.
    """

    def __call__(self, class_type: type, *args: Any, applied_instantiation_links: dict[str, Any], **kwargs: Any) -> Any:
        config = _subcommand_section(self.cli.config, self.cli.subcommand).get(self.key) or {}
        class_path = config.get("class_path") if hasattr(config, "get") else None
        if class_path is not None and _import_class(class_path) is not class_type:
            return class_type(*args, **kwargs)
        return super().__call__(class_type, *args, applied_instantiation_links=applied_instantiation_links, **kwargs)


#: Parsers built ahead of their command (:meth:`FederatedCLI.setup_parser` with ``prebuild=True``: a suite's fork
#: server), by the construction they serve; a command takes its one and no later command sees it again.
_PREBUILT: dict[str, dict[str, Any]] = {}
_PARSER_ATTRIBUTES = ("parser", "_subcommand_parsers", "_subcommand_method_arguments")


class ParserPrebuilt(Exception):  # noqa: N818 - a signal that ends a construction, not an error
    """Ends a ``FederatedCLI(..., prebuild=True)`` once its parser is built and kept for the next such command."""


class FederatedCLI(LightningCLI):
    """A LightningCLI whose ``trainer`` is a :class:`~fedhet.plugins.FederatedTrainer`.

    ``model`` is any :class:`~fedhet.modules.FederatedModule` subclass and ``data`` any
    :class:`~fedhet.datamodules.FederatedDataModule` subclass, chosen by ``class_path`` in the config; every trainer
    knob (``trainer.rounds``, ``trainer.sampler``, ``trainer.logger``...) is an option. Unknown keys and wrong types
    are refused before any data is read. The resolved config is saved beside the run's logs.
    """

    def __init__(self, full_errors: bool = False, prebuild: bool = False, **kwargs: Any) -> None:
        """Build the parser, parse ``args`` (or the command line) and run the subcommand, as ``LightningCLI`` does.

        Args:
            full_errors: whether a usage error is reported in full, as jsonargparse reports it (``--debug``), rather
                than in one line (:class:`FederatedArgumentParser`).
            prebuild: build the parser only, keep it for the next command built alike (same subcommand, options and
                classes), and raise :class:`ParserPrebuilt`: a suite's fork server builds its runs' parsers once,
                so that each forked run parses with a fresh parser it did not build (:meth:`setup_parser`).
            **kwargs: as for ``LightningCLI``; ``model_class`` and ``datamodule_class`` default to
                :class:`~fedhet.modules.FederatedModule` and :class:`~fedhet.datamodules.FederatedDataModule`, in
                subclass mode. ``load_from_checkpoint`` support is always on (see :meth:`instantiate_classes`).

        """
        self.full_errors = full_errors
        self._prebuild = prebuild
        given = kwargs.get("args")
        words = sys.argv[1:] if given is None else given
        first = words[0] if isinstance(words, (list, tuple)) and words else None
        self._command: str | None = first if first in SUBCOMMANDS else None
        kwargs.setdefault("model_class", FederatedModule)
        kwargs.setdefault("datamodule_class", FederatedDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("parser_class", FederatedArgumentParser)
        kwargs.pop("load_from_checkpoint_support", None)
        super().__init__(
            trainer_class=FederatedTrainer,  # type: ignore[arg-type]
            save_config_callback=None,
            seed_everything_default=False,
            auto_configure_optimizers=False,
            load_from_checkpoint_support=False,  # instantiate_classes gives the instantiators to jsonargparse itself
            **kwargs,
        )

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """Lightning's parser setup, or the parser a ``prebuild`` construction alike kept (taken once: never reused).

        Nothing a parse reads differs between the two: the parser depends only on what the key holds (the
        subcommand, the parser options, the trainer's defaults but callbacks, the classes) and is not parsed with
        before it is taken.
        """
        defaults = {key: value for key, value in self.trainer_defaults.items() if key != "callbacks"}
        classes = (self._model_class, self._datamodule_class, self.subclass_mode_model, self.subclass_mode_data)
        key = repr((type(self), self._command, self.full_errors, add_subcommands, main_kwargs, subparser_kwargs))
        key += repr((defaults, classes, self.parser_class, self.auto_configure_optimizers))
        built = _PREBUILT.pop(key, None)
        if built is None:
            super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        else:
            for name, value in built.items():
                setattr(self, name, value)
        if self._prebuild:
            _PREBUILT[key] = {name: getattr(self, name) for name in _PARSER_ATTRIBUTES if hasattr(self, name)}
            raise ParserPrebuilt

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Lightning's parser named ``fedhet``, with argparse's prefix matching off: ``--trainer.round 2`` is an error.

        Each parser reports its errors in one line, or in full when the CLI was given ``full_errors=True``.
        """
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("prog", "fedhet")
        kwargs.setdefault("description", DESCRIPTION)
        if issubclass(self.parser_class, FederatedArgumentParser):
            kwargs.setdefault("full_errors", self.full_errors)
        return super().init_parser(**kwargs)

    def before_fit(self) -> None:
        """Run the runs the module needs first (e.g. FedDaDiL's step 1) when their folders hold no checkpoint of them.

        A required run's latest checkpoint is used only when its version folder's ``config.yaml`` is what its config
        resolves to now (``ckpt_path`` aside); after an edit to that config, or to a default it relies on, the run
        runs again in a new version folder, whose checkpoint the module then reads.
        """
        for config in getattr(self.model, "required_runs", list)():
            root = config_root(config)
            checkpoint = latest_checkpoint(root)
            if checkpoint is None:
                reason = f"has no checkpoint under {root} yet"
            elif not self._made_by(checkpoint, config):
                reason = f"no longer matches the config.yaml of the run that saved {checkpoint}"
            else:
                continue
            print(f"fedhet: {config} {reason}: running it first", flush=True)
            FederatedCLI(full_errors=self.full_errors, args=["fit", "-c", str(config)])

    def _resolved(self, namespace: Namespace, subcommand: str | None) -> dict[str, Any]:
        """``namespace`` with every default filled in, as the plain mapping a run folder's ``config.yaml`` holds.

        ``namespace`` is one the parser made (and checked) itself, so it is dumped without checking it again, and read
        back with libyaml's loader where PyYAML has it (the same mapping, a fraction of the pure-Python one's CPU).
        """
        text = self.parser.dump(
            namespace, skip_unset=False, skip_link_targets=False, skip_validation=True, format="yaml"
        )
        return cast(dict[str, Any], _subcommand_section(yaml.load(text, Loader=_SAFE_LOADER), subcommand))  # noqa: S506

    def _made_by(self, checkpoint: Path, config: str) -> bool:
        """Whether the run that saved ``checkpoint`` was ``fedhet fit -c config`` as ``config`` reads now."""
        saved = checkpoint.parent.parent / "config.yaml"
        try:
            then = yaml.safe_load(saved.read_text())
        except (OSError, yaml.YAMLError):  # missing or unreadable: the run is not known to be this config's
            return False
        if not isinstance(then, dict):
            return False
        now = self._resolved(self.parser.parse_args(["fit", "-c", str(config)]), "fit")
        return bool({**now, "ckpt_path": None} == {**then, "ckpt_path": None})

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """The subcommands whose parsers are built: the one the command line runs, or, if it names none, all of them.

        :data:`SUBCOMMANDS` are ``fit``, ``validate``, ``test``, ``export`` (clients as Lightning checkpoints). Each
        parser holds every option of the trainer, the model and the data (a few tenths of a CPU second to build), so
        ``fedhet fit ...`` builds the ``fit`` parser alone; a command line that starts with an option (``fedhet -c
        config.yaml fit``) or names no known subcommand gets them all (and the usual error for an unknown one).
        """
        return {self._command: SUBCOMMANDS[self._command]} if self._command is not None else dict(SUBCOMMANDS)

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the FederatedTrainer's arguments (it is not a ``lightning.Trainer``), then model and data."""
        parser.add_class_arguments(FederatedTrainer, "trainer", instantiate=False, fail_untyped=False, sub_configs=True)
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_argument(
            "--epochs",
            type=int | None,
            default=None,
            help="The run's length in epochs of local training, in place of trainer.rounds: the rounds follow from"
            " the module's rounds per epoch (Global Layers' per-step schedule: B rounds an epoch), and"
            " trainer.reporting.eval_every then counts epochs.",
        )
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data)

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a value they refuse (``rounds: 0``...) ends like a parse error, exit 2.

        As in LightningCLI with ``load_from_checkpoint_support``, the model and the datamodule save the config's
        arguments as their hyperparameters (``load_from_checkpoint`` rebuilds them from those); here only the
        classes the config names do (:class:`_TopLevelHyperparameters`). A sampler that needs more clients per round
        than the federation declares (``min_clients`` above ``data.num_clients``) is refused here too, before any
        data is read; where the count is only known from the data, the trainer refuses it when ``fit`` starts,
        before any round runs. The process computes on ``trainer.processes.threads`` threads from here on, the model
        and the data built included (:func:`~fedhet.plugins.processes.threads.pin_threads`).
        """
        self.config_dump = self._resolved(self.config, self.subcommand)  # what _InstantiatorFn reads
        threads = _subcommand_section(self.config, self.subcommand).get("trainer.processes.threads")
        if isinstance(threads, int) and threads >= 1:  # a value out of range is refused by Processes below
            pin_threads(threads)
        instantiators = [
            (_TopLevelHyperparameters(cli=self, key=key), base, subclasses)
            for key, base, subclasses in (
                ("model", self._model_class, self.subclass_mode_model),
                ("data", self._datamodule_class, self.subclass_mode_data),
            )
        ]
        try:
            self.config_init = self.parser.instantiate(self.config, instantiators=instantiators)
            section = _subcommand_section(self.config_init, self.subcommand)
            self.datamodule, self.model = section.get("data"), section.get("model")
            self.trainer = self.instantiate_trainer()  # type: ignore[assignment]
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
        section = _subcommand_section(self.config_init, self.subcommand)
        config = {**section.get("trainer", {}), **kwargs}
        if section.get("epochs") is not None:  # the length in epochs (fedhet.plugins.rounds.epochs)
            if config.get("rounds", _DEFAULT_ROUNDS) != _DEFAULT_ROUNDS:
                raise ValueError(
                    f"give the run's length once: epochs={section['epochs']} or trainer.rounds={config['rounds']}"
                    " (add --epochs null to count rounds)"
                )
            reporting = config.get("reporting") or Reporting()
            schedule = epoch_schedule(self.model, section["epochs"], reporting.eval_every)
            config["rounds"] = schedule.rounds
            config["reporting"] = dataclasses.replace(reporting, eval_every=schedule.eval_every)
        extra = [section.get(key) for key in self._parser(self.subcommand).callback_keys]
        persistent = self.trainer_defaults.get("callbacks") or []
        persistent = list(persistent) if isinstance(persistent, (list, tuple)) else [persistent]
        if extra or persistent:
            given = config.get("callbacks") or []
            config["callbacks"] = [*(given if isinstance(given, (list, tuple)) else [given]), *extra, *persistent]
        trainer = FederatedTrainer(**config)
        trainer.run_config = copy.deepcopy(self.config_dump)
        return trainer


def run(args: list[str] | None, debug: bool) -> None:
    """Run a LightningCLI command (``fit``, ``validate``, ``test``, ``export``); see :func:`fedhet.cli.main`.

    Args:
        args: the command line after ``fedhet``, ``--debug`` taken out (``None``: ``sys.argv``, already without it).
        debug: whether errors are shown in full, with the traceback.

    """
    try:
        from fedhet.callbacks.accuracy_curve import AccuracyCurve

        FederatedCLI(
            full_errors=debug,
            args=args,
            trainer_defaults={"callbacks": [AccuracyCurve()]},  # plots/accuracy.png in every run folder
        )
    except Exception as err:
        if debug:
            raise
        from fedhet.plugins.uploads.policies import DIVERGED_EXIT_STATUS, ClientFailuresError

        message = str(err).strip() or type(err).__name__
        line = f"fedhet: error: {message}\n(--debug or FEDHET_DEBUG=1 shows the traceback)"
        if isinstance(err, ClientFailuresError) and err.diverged:
            sys.stderr.write(line + "\n")
            sys.exit(DIVERGED_EXIT_STATUS)
        sys.exit(line)
