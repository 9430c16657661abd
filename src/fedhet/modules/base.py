"""FederatedModule: the LightningModule base that makes a method federable."""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable, Mapping
from contextvars import ContextVar
from fnmatch import fnmatchcase
from typing import Any, cast

import torch
from lightning.pytorch import LightningModule
from torch import Tensor
from torchmetrics import MetricCollection

from fedhet.core import BatchLossModule, ClientSpec, LocalPhase, LocalTraining, Stacking, UploadDeclaration
from fedhet.plugins import Aggregator, WeightedMean
from fedhet.plugins.clients.local_loop import computed_metrics
from fedhet.plugins.clients.meta_build import on_meta
from fedhet.plugins.storage.export import check_built_shapes, checkpoint_source, in_memory, read_client_checkpoint

#: the client description of the checkpoint being loaded by :meth:`FederatedModule.load_from_checkpoint`
_LOADING_SPEC: ContextVar[ClientSpec | None] = ContextVar("fedhet_loading_client_spec", default=None)


_LOADER_DEPRECATION = (
    "FederatedModule.local_train_loader is deprecated: the engine hands a client's batches over with"
    " set_local_training(LocalTraining(batches, ...)); read them with train_batches()"
)


class FederatedModule(LightningModule):
    """A LightningModule that knows which of its parameters are shared, what it uploads, and its local schedule.

    Subclasses set :attr:`shared` (``fnmatch`` patterns over ``state_dict`` names; everything else is personal and
    never leaves the client), build their layers in an idempotent ``configure_model()`` from :attr:`client_spec`, and
    may override the federation hooks below. The same module trains one client under a plain ``lightning.Trainer``
    (``trainer.fit(module, client_datamodule)``): ``setup`` then reads the client's description from the datamodule's
    ``spec`` and the local phases run one per epoch, in a cycle.
    """

    shared: tuple[str, ...] = ("*",)
    """``fnmatch`` patterns of the parameter and buffer names sent to and averaged by the server."""

    target_label_metrics: tuple[str, ...] = ()
    """``fnmatch`` patterns of the round metrics computed from labels that no choice may read: a domain adaptation
    target's (FedDaDiL: ``val/acc_mean`` averages the target client too). Tuning on one, or pruning on one, is refused
    (:func:`fedhet.experiments.trials.check_label_free`)."""

    keep_optimizer_state: bool = False
    """Keep each client's optimizer state between its rounds (in the client state store and checkpoints)."""

    reuse_optimizers: bool = False
    """``configure_optimizers()`` depends only on the module's hyperparameters and its parameters (not on the client
    or the round), so the engine may build the optimizers once per module and reset them for each client (state
    cleared, group settings restored) instead of building new ones: the same steps, less Python per client."""

    def __init__(self) -> None:
        super().__init__()
        self.client_spec: ClientSpec | None = _LOADING_SPEC.get()
        self._trainable_patterns: tuple[str, ...] = ("*",)  # what set_local_phase last applied: all trainable
        self.local_phase: LocalPhase | None = None
        """The local phase running now (set by the engine, or per epoch under a plain Trainer), ``None`` outside
        local training: ``training_step`` reads ``self.local_phase.name`` where its loss depends on the phase."""
        self.local_training: LocalTraining | None = None
        """What the engine handed over for the local training under way (:meth:`set_local_training`), else ``None``."""

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: Any,
        map_location: Any = None,
        hparams_file: Any = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Lightning's ``load_from_checkpoint``, for a client exported by ``FederatedTrainer.export_client``.

        The checkpoint holds the client's description, which the module needs to build its layers before Lightning
        loads the weights; checkpoints without one load as in Lightning. A checkpoint is data, never code: the file
        (a path, an ``http(s)`` URL or an open file) is read once, weights-only, and checked
        (:func:`~fedhet.plugins.storage.export.read_client_checkpoint`) before Lightning builds the module from it.

        The module its hyperparameters (and ``kwargs``) build is first built on the ``meta`` device, where layers
        take no memory, and must hold exactly the tensors the file holds, with their shapes
        (:func:`~fedhet.plugins.storage.export.check_built_shapes`): hyperparameters that would build larger layers
        than the file's are refused before anything is allocated.

        Raises:
            ValueError: for ``weights_only=False``, and naming the file (and the field) for a checkpoint that holds
                more than tensors and plain values, is nested too deep, holds a crafted client description, or whose
                hyperparameters build tensors other than those it holds (naming the first).

        """
        if weights_only is False:
            raise ValueError(f"{cls.__name__}.load_from_checkpoint: field 'weights_only' must not be False")
        checkpoint, spec = read_client_checkpoint(checkpoint_path)
        token = _LOADING_SPEC.set(spec)
        try:
            # first on the meta device (shapes, no memory), the tensors left out: what the hyperparameters build must be
            # what the file holds before anything is built for real (a 3 kB file could ask for 14 GB of layers)
            skeleton = in_memory({**checkpoint, "state_dict": {}})
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"(The state dict in|Found keys that are)")
                built = on_meta(
                    lambda: super(FederatedModule, cls).load_from_checkpoint(
                        skeleton, None, hparams_file, False, weights_only=True, **kwargs
                    )
                )
            stored = checkpoint.get("state_dict")
            stored = stored if isinstance(stored, dict) else {}
            check_built_shapes(built.state_dict(), stored, checkpoint_source(checkpoint_path), strict is not False)
            return super().load_from_checkpoint(
                in_memory(checkpoint), map_location, hparams_file, strict, weights_only=True, **kwargs
            )
        finally:
            _LOADING_SPEC.reset(token)

    # ---------------------------------------------------------------- the loss
    def stacking(self) -> Stacking | None:
        """How this module's clients train many at once (``FederatedTrainer(runner=StackedRunner(N))``), or ``None``.

        ``None`` (the default): they train one at a time. A module that writes its per-sample losses
        (``sample_losses``) or its masked batch loss (``masked_loss``) returns a :class:`~fedhet.core.Stacking`
        saying which of its attributes its local hooks set per client and what its steps draw; see
        :mod:`fedhet.plugins.clients.stacked`.
        """
        return None

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One local step's loss, :meth:`step_loss`, logged as ``train/loss``.

        A method writes its loss once, as ``sample_losses(batch)`` (the ``(B,)`` per-sample losses) or, for a loss of
        the whole batch, ``masked_loss(batch, mask)`` with :attr:`Stacking.draws <fedhet.core.Stacking.draws>`; the
        sequential and the stacked paths then train the same maths. A method whose loss is neither overrides this.
        """
        loss = self.step_loss(batch)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def step_loss(self, batch: Any) -> Tensor:
        """The loss of a batch, every row counted: the mean of ``sample_losses``, or ``masked_loss`` of a full mask.

        ``masked_loss`` (a stacking with ``draws``) takes the batch completed by ``draws`` in the running phase.

        Raises:
            NotImplementedError: the module defines neither ``sample_losses`` nor ``training_step``.

        """
        stacking = self.stacking()
        if stacking is not None and stacking.draws is not None:
            batch = stacking.draws(batch, self.local_phase.name if self.local_phase is not None else None)
            mask = torch.ones(len(batch[0]), dtype=torch.bool, device=batch[0].device)
            return cast(BatchLossModule, self).masked_loss(batch, mask)
        sample_losses = getattr(self, "sample_losses", None)  # not the protocol's isinstance: ~7 µs every step
        if sample_losses is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither sample_losses nor training_step")
        return cast(Tensor, sample_losses(batch)).mean()

    # ---------------------------------------------------------------- the client
    def setup_client(self, spec: ClientSpec) -> None:
        """Remember the client's description; ``configure_model()`` builds the layers it needs."""
        self._set_plain("client_spec", spec)

    def client_signature(self, spec: ClientSpec) -> Hashable:
        """Clients with equal signatures get identically shaped layers (the engine reuses one module for them)."""
        return spec.architecture_key()

    def setup(self, stage: str) -> None:
        """Under a plain Trainer: take the client's description from its ``ClientDataModule``."""
        if self.client_spec is None:
            spec = getattr(getattr(self.trainer, "datamodule", None), "spec", None)
            if not isinstance(spec, ClientSpec):
                raise ValueError(
                    f"{type(self).__name__} needs a client description: fit it with a fedhet ClientDataModule or call"
                    " setup_client(spec) first"
                )
            self.setup_client(spec)

    @property
    def spec(self) -> ClientSpec:
        """The client's description; raises if the module was not given one yet."""
        if self.client_spec is None:
            raise RuntimeError(f"{type(self).__name__}: call setup_client(spec) before configure_model()")
        return self.client_spec

    # ---------------------------------------------------------------- what leaves the client
    def is_shared(self, name: str) -> bool:
        """Whether the parameter or buffer ``name`` is shared with the server."""
        return any(fnmatchcase(name, pattern) for pattern in self.shared)

    def shared_state_dict(self) -> dict[str, Tensor]:
        """The shared parameters and buffers, by name (views, not copies)."""
        return {name: value for name, value in self.state_dict().items() if self.is_shared(name)}

    def personal_state_dict(self) -> dict[str, Tensor]:
        """The personal parameters and buffers, by name: what never leaves the client."""
        return {name: value for name, value in self.state_dict().items() if not self.is_shared(name)}

    def client_statistics(self) -> dict[str, Tensor]:
        """Statistics uploaded besides the shared parameters (none by default)."""
        return {}

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """Take the server's broadcast statistics (ignored by default)."""

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """What a client described by ``spec`` uploads besides its shared parameters: no statistic by default.

        A method that overrides :meth:`client_statistics` declares here each statistic's name, shape and dtype as a
        function of ``spec`` (the module is built for ``spec``'s architecture when the engine asks), and the names it
        logs with ``self.log`` during local training; the engine admits no upload that differs (a simulated client,
        or a deployed node, that sends anything else is a failed client).
        """
        return UploadDeclaration()

    def configure_aggregator(self) -> Aggregator:
        """How the server combines the shared parameters: a sample-weighted mean by default."""
        return WeightedMean()

    def set_local_training(self, training: LocalTraining | None) -> None:
        """Take what the engine hands over for a client's local training (its batches, phases, logs); ``None`` ends it.

        A test or a script that drives the module's hooks itself may hand over batches the same way:
        ``module.set_local_training(LocalTraining(loader))``.
        """
        self._set_plain("local_training", training)

    def _set_plain(self, name: str, value: Any) -> None:
        """Set an attribute that is no parameter, buffer or layer, as ``setattr`` would, without its look-ups.

        ``nn.Module.__setattr__`` first checks the value and the name against the module's parameters, buffers and
        layers (about a microsecond); the engine sets these attributes for every client and round.
        """
        self.__dict__[name] = value

    @property
    def local_train_loader(self) -> Iterable[Any] | None:
        """Deprecated: the batches of :attr:`local_training`; read :meth:`train_batches` instead."""
        warnings.warn(_LOADER_DEPRECATION, DeprecationWarning, stacklevel=2)
        return None if self.local_training is None else self.local_training.batches

    @local_train_loader.setter
    def local_train_loader(self, loader: Iterable[Any] | None) -> None:
        warnings.warn(_LOADER_DEPRECATION, DeprecationWarning, stacklevel=2)
        self.set_local_training(None if loader is None else LocalTraining(loader))

    def train_batches(self) -> Iterable[Any]:
        """The client's training batches: given by the federation engine for local training, else the Trainer's.

        Methods that take statistics over the local data (e.g. FedPAC's head statistics before training) read them
        here, under the engine and under a plain ``lightning.Trainer`` alike.
        """
        if self.local_training is not None:
            return self.local_training.batches
        if self._trainer is not None and self.trainer.train_dataloader is not None:
            return cast(Iterable[Any], self.trainer.train_dataloader)
        raise RuntimeError(f"{type(self).__name__} has no training batches outside local training")

    # ---------------------------------------------------------------- local schedule
    def local_phases(self) -> list[LocalPhase]:
        """One round's local schedule: by default every parameter trains for the trainer's local epochs."""
        return [LocalPhase()]

    def preparation_phases(self) -> list[LocalPhase]:
        """Phases the engine runs before :meth:`local_phases` at this participation (none by default).

        For work on another objective that a client does at some participations only, e.g. FLIC's pre-training of
        its embedding at the first one; such a phase usually names an optimizer and a ``loss_key`` of its own.
        """
        return []

    def adaptation_phases(self) -> list[LocalPhase]:
        """Local training on a throw-away copy before each evaluation (none by default)."""
        return []

    def new_client_phases(self) -> list[LocalPhase]:
        """What a client that joins after training adapts, from the final federation (its personal parameters).

        The engine runs these phases for each client held out of training
        (:class:`~fedhet.plugins.NewClients`), each for the same ``adapt_epochs`` epochs whatever the
        method, before scoring it as ``test_new/...``. By default every parameter the module keeps personal trains
        (FedRep's, FedPer's and FedPAC's head, Global Layers' own layers); a module without personal parameters
        adapts as its :meth:`adaptation_phases` say (FedAvg-FT's fine-tuning; none for plain FedAvg).
        """
        personal = tuple(name for name, _ in self.named_parameters() if not self.is_shared(name))
        return [LocalPhase("new_client", personal)] if personal else self.adaptation_phases()

    def set_local_phase(self, phase: LocalPhase | None) -> None:
        """Record ``phase`` as :attr:`local_phase` and freeze every parameter it does not train (``None``: all train).

        The patterns last applied are remembered, so re-applying the same phase (every round) costs nothing.
        """
        self._set_plain("local_phase", phase)
        trainable = ("*",) if phase is None else phase.trainable
        if trainable == self._trainable_patterns:
            return
        for name, param in self.named_parameters():
            param.requires_grad_(any(fnmatchcase(name, p) for p in trainable))
        self._trainable_patterns = trainable

    def on_train_epoch_start(self) -> None:
        """Under a plain Trainer, cycle through the local phases, each for its ``epochs`` (one when unset)."""
        schedule = [phase for phase in self.local_phases() for _ in range(phase.epochs or 1)]
        self.set_local_phase(schedule[self.current_epoch % len(schedule)])

    def on_train_end(self) -> None:
        """Leave every parameter trainable once local training ends."""
        self.set_local_phase(None)

    # ---------------------------------------------------------------- evaluation
    def configure_metrics(self, stage: str) -> MetricCollection:
        """A new collection of the metrics that ``validation_step``/``test_step`` update for ``stage``.

        Build them with ``sync_on_compute=False``: a client's metrics are its own, never reduced across processes.
        """
        raise NotImplementedError(f"{type(self).__name__} must define configure_metrics(stage)")

    def evaluation_metrics(self, stage: str) -> MetricCollection:
        """The metrics of ``stage`` (``"val"`` or ``"test"``), made by :meth:`configure_metrics` on first use.

        They live outside the module tree: ``state_dict``, ``parameters`` and the optimizer never walk them (the
        engine calls those for every client of every round), and modules built only to initialise a client's personal
        layers never create them. They follow the module's device when asked for.
        """
        cache: dict[str, tuple[MetricCollection, torch.device]] = self.__dict__.setdefault("_evaluation_metrics", {})
        if stage not in cache or cache[stage][1] != self.device:
            metrics = cache[stage][0] if stage in cache else self.configure_metrics(stage)
            cache[stage] = (metrics.to(self.device), self.device)
        return cache[stage][0]

    def _log_evaluation(self, stage: str) -> None:
        metrics = self.evaluation_metrics(stage)
        self.log_dict({f"{stage}/{name}": value for name, value in computed_metrics(metrics).items()})
        metrics.reset()

    def on_validation_epoch_end(self) -> None:
        """Under a plain Trainer: log the validation metrics of the epoch, then reset them."""
        self._log_evaluation("val")

    def on_test_epoch_end(self) -> None:
        """Under a plain Trainer: log the test metrics of the epoch, then reset them."""
        self._log_evaluation("test")

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Log through Lightning under a Trainer; under the federation engine, into the round's metrics.

        During the engine's local training (:attr:`local_training` is set) each value is kept; the engine averages a
        name's values over the client's steps into the client's training metrics, and the round logs their mean over
        the clients as ``<name>_mean`` (e.g. ``train/align_mean``). The stacked path runs no ``training_step`` and so
        logs nothing of the module's.
        """
        if self._trainer is not None:
            super().log(name, value, *args, **kwargs)
        elif self.local_training is not None:
            tensor = value.detach() if isinstance(value, Tensor) else torch.as_tensor(float(value))
            self.local_training.logs.setdefault(name, []).append(tensor)
