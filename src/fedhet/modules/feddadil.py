r"""FedDaDiL: federated dataset dictionary learning in Wasserstein space for multi-source domain adaptation.

E. F. Montesuma, F. Espinoza Castellon, F. N. Mboula, A. Mayoue, A. Souloumiac, C. Gouy-Pailler, "Dataset Dictionary
Learning in a Wasserstein Space for Federated Domain Adaptation", 2024. Each client is a domain: labelled sources and
one unlabelled target. Step 1 is plain FedAvg of an encoder and a linear head on the sources
(:class:`~fedhet.modules.FedAvg` with uniform averaging, the target left out); step 2 (this module) learns, on the
frozen encoder's features, a dictionary of :math:`K` labelled atoms shared by every client and one private vector of
barycentric coordinates :math:`\alpha_\ell \in \Delta_K` per client, so that each client's data is close to the
Wasserstein barycenter :math:`B(\alpha_\ell; P)`. The server averages the clients' atom versions
(:class:`~fedhet.callbacks.DictionaryAveraging`); :math:`\alpha_\ell` never leaves its client. The target is labelled
from its barycenter (DaDiL-R) or by per-atom classifiers mixed by its coordinates (DaDiL-E).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from fedhet.callbacks.feddadil import ATOM_NAMES, GLOBAL_NAMES, DictionaryAveraging, feddadil_upload
from fedhet.core import ClientSpec, LocalPhase, TensorSpec, UploadDeclaration
from fedhet.functional.dictionary import (
    atom_batches,
    class_balanced_indices,
    dictionary_loss,
    ensemble_probabilities,
    fit_softmax_regression,
    init_dictionary,
)
from fedhet.functional.head_mixing import project_simplex
from fedhet.functional.wasserstein import Solver, wasserstein_barycenter
from fedhet.modules.base import FederatedModule
from fedhet.modules.blocks import mlp
from fedhet.plugins.storage.checkpoint import FORMAT as CHECKPOINT_FORMAT
from fedhet.plugins.storage.checkpoint import load_checkpoint
from fedhet.plugins.storage.run_folder import config_root
from fedhet.plugins.storage.versions import latest_checkpoint

#: what a client uploads (its atom version) and what the server broadcasts (the global dictionary)
#: logit of the true class in the initial atom labels of the softmax parametrisation (softmax(10) is ~1 - 4e-4 c)
LABEL_LOGIT = 10.0


class _Labellers(NamedTuple):
    """The target-labelling classifiers: one per atom (DaDiL-E) and one on the reconstruction (DaDiL-R)."""

    atom_weights: Tensor  # (K, c, d)
    atom_biases: Tensor  # (K, c)
    weight: Tensor  # (c, d)
    bias: Tensor  # (c,)


def load_step1_state(path: str | Path) -> dict[str, Tensor]:
    """The ``body.*`` and ``head.*`` tensors of a step-1 model: a fedhet checkpoint (server state) or a state dict.

    Args:
        path: a ``FederatedTrainer`` checkpoint (e.g. ``<root>/version_0/checkpoints/last.ckpt`` of a FedAvg run), a
            run folder ``<root>`` (its latest version's ``last.ckpt``), or a file holding a ``state_dict`` saved with
            ``torch.save``.

    Returns:
        the encoder (``body.*``) and head (``head.*``) tensors, keyed by their names in
        :class:`~fedhet.modules.FederatedClassifier`.

    """
    if Path(path).is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise FileNotFoundError(f"FedDaDiL: no step-1 checkpoint under {str(path)!r}; run step 1 first")
        path = found
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and state.get("format") == CHECKPOINT_FORMAT:
        state = load_checkpoint(path).server["shared"]  # a federation checkpoint, its checksum verified: the server's
    return {name: value for name, value in state.items() if name.startswith(("body.", "head."))}


class FedDaDiL(FederatedModule):
    r"""FedDaDiL's client (paper Alg. 2): private coordinates, a local version of the shared atoms, a frozen encoder.

    Features are :math:`z = \phi(x)`, with :math:`\phi` the MLP body of the step-1 FedAvg model (``hidden_dims`` and
    ``encoder_checkpoint``; no hidden layers and no checkpoint: the flattened inputs themselves). Atoms are
    :math:`(Z_k, Y_k)` with :math:`Z` of shape ``(K, n, d)`` and soft labels :math:`Y` of shape ``(K, n, c)``, drawn
    from ``atom_seed`` so that every client starts from the same dictionary; the coordinates start at :math:`1/K`.

    Local round (paper Alg. 2): ``atom_epochs`` passes over the atoms in ``ceil(n / batch_size)`` mini-batches, the
    paper's contiguous index ranges (:func:`~fedhet.functional.atom_batches`: with ``batch_size`` a multiple of the
    number of classes every batch of the initial atoms is class-balanced); ``atom_batches="shuffled"`` draws one
    permutation of the support indices per pass instead, shared by all atoms. Each step draws a client mini-batch —
    class-balanced, ``batch_size // c`` per present class with replacement, for a source; ``batch_size`` uniform rows
    for the target — computes the barycenter of the atom mini-batches with as many points, and descends the transport
    cost between them (labelled for a source, features only for the target) in the atoms and :math:`\alpha`, plans
    held fixed. The default step is the paper's plain gradient step (``optimizer="sgd"``) followed by the projection of
    :math:`\alpha` and of the label rows onto their simplices (``parametrisation="projection"``), or the logits of a
    softmax (``"softmax"``). Adam, as in the authors' centralised code, is an option; with a fresh state each round and
    a gradient almost equal across atoms its sign-like first steps move every coordinate alike and the projection
    undoes them, so ``keep_optimizer_state=True`` carries its moments over rounds. Uploads: the atom version only
    (``ATOM_NAMES``); ``shared`` is empty, :math:`\alpha`, the encoder and the data stay personal.

    Evaluation of a client (any client; for the target this is the method's output): ``acc_e`` (DaDiL-E: one softmax
    regression per atom, mixed by :math:`\alpha`), ``acc_r`` (DaDiL-R: softmax regression on the labelled barycenter of
    the full atoms, :math:`n` points), with a step-1 head in the checkpoint ``acc_source_only`` (the step-1 FedAvg
    model unchanged: the no-adaptation baseline), and ``acc``, the one of them named by ``labelling``. ``target_acc``
    is ``acc`` on the target only (no source updates it, so ``test/target_acc_mean`` is the target's accuracy, the
    method's result; never a tuning objective: it reads the target's labels). ``source_acc`` is
    ``acc`` on the labelled sources only (the target never updates it, so ``val/source_acc_mean`` is the sources'
    mean): the criterion for tuning without target labels, source validation (the usual criterion of unsupervised
    domain adaptation that importance-weighted variants refine: Sugiyama, Krauledat and Müller, 2007, "Covariate
    Shift Adaptation by Importance Weighted Cross Validation", JMLR 8; You, Wang, Long and Jordan, 2019, "Towards
    Accurate Model Selection in Deep Unsupervised Domain Adaptation", ICML). It reads the target's features (through
    the shared atoms it trained), never its labels. With
    ``log_coordinates`` the client's coordinates are reported beside them as ``alpha_0`` ... ``alpha_{K-1}``: a
    diagnostic of experiments (how far each :math:`\alpha` moved from uniform, how the target's differ from the
    sources'), off by default because it puts the private coordinates in the metrics the server records.

    Args:
        num_atoms: :math:`K`.
        atom_size: :math:`n`, points per atom (a multiple of the number of classes keeps the initial labels balanced).
        batch_size: :math:`n_b`, atom and client mini-batch size.
        atom_epochs: :math:`E`, passes over the atoms per round.
        target: client id of the unlabelled target (its labels are only used to evaluate); ``None``: all labelled.
        hidden_dims: hidden widths of the step-1 MLP encoder (empty: features are the flattened inputs).
        encoder_checkpoint: step-1 model (see :func:`load_step1_state`); required when ``hidden_dims`` is not empty,
            unless ``encoder_config`` is given.
        encoder_config: step 1's ``fedhet`` config instead: the encoder is its run folder's latest checkpoint, and
            ``fedhet fit`` runs step 1 first when that folder holds none (:meth:`required_runs`), so both steps run
            from one command.
        labelling: ``"e"``, ``"r"`` or ``"source_only"`` (the step-1 head, which step 2 never changes: the
            baseline's row of a comparison), the labelling reported as ``acc``.
        optimizer: ``"sgd"`` (the paper's projected gradient steps) or ``"adam"``.
        lr: :math:`\eta`, the step of the atoms (features and labels).
        coordinate_lr: the step of the coordinates (``None``: ``lr``, the paper's single :math:`\eta`). The gradient
            in :math:`\alpha` is of the order of the transport cost while the gradient in one atom point is of the
            order of the cost over the mini-batch size, so under plain gradient steps feature spaces of large cost
            need a much smaller step for :math:`\alpha` than for the atoms.
        keep_optimizer_state: carry the optimizer's state (Adam's moments) from one round of a client to its next;
            otherwise it starts fresh every round.
        atom_batches: ``"contiguous"`` (the paper's index ranges) or ``"shuffled"`` (a new permutation every pass).
        log_coordinates: report :math:`\alpha` among the evaluation metrics (see above).
        beta: weight of the label term of the ground cost; ``None`` adapts it to the largest feature cost.
        solver: ``"emd"`` (exact) or ``"sinkhorn"``.
        reg: Sinkhorn regularisation (relative to the largest cost).
        barycenter_iters: fixed-point iterations of each barycenter.
        barycenter_tol: their tolerance.
        parametrisation: ``"projection"`` (projected steps) or ``"softmax"`` (logits) for coordinates and labels.
        atom_seed: seed of the initial dictionary and of the reconstruction's initial support.
        classifier_weight_decay: L2 penalty of the labelling classifiers.
        aggregation: rule of :class:`~fedhet.callbacks.DictionaryAveraging`: ``"avg"``, ``"weighted"`` or
            ``"random"``.

    """

    shared = ()
    target_label_metrics = ("*/acc", "*/acc_*", "*/acc/*", "*/target_acc*")
    """Every accuracy but the sources' (``source_acc``) counts the target client, whose labels are read only to score
    the method: declared whether or not ``target`` is set, since a suite is checked before any module is built."""

    def __init__(
        self,
        num_atoms: int = 3,
        atom_size: int = 200,
        batch_size: int = 50,
        atom_epochs: int = 1,
        target: str | None = None,
        hidden_dims: Sequence[int] = (),
        encoder_checkpoint: str | None = None,
        encoder_config: str | None = None,
        labelling: Literal["e", "r", "source_only"] = "r",
        optimizer: Literal["adam", "sgd"] = "sgd",
        lr: float = 0.1,
        coordinate_lr: float | None = None,
        keep_optimizer_state: bool = False,
        atom_batches: Literal["contiguous", "shuffled"] = "contiguous",
        log_coordinates: bool = False,
        beta: float | None = None,
        solver: Solver = "emd",
        reg: float = 0.05,
        barycenter_iters: int = 10,
        barycenter_tol: float = 1e-9,
        parametrisation: Literal["projection", "softmax"] = "projection",
        atom_seed: int = 0,
        classifier_weight_decay: float = 1e-3,
        aggregation: Literal["avg", "weighted", "random"] = "avg",
    ) -> None:
        super().__init__()
        for name, value in (("num_atoms", num_atoms), ("atom_size", atom_size), ("batch_size", batch_size)):
            if value < 1:
                raise ValueError(f"FedDaDiL: field '{name}' must be at least 1, got {value}")
        for field, choice, allowed in (
            ("labelling", labelling, ("e", "r", "source_only")),
            ("optimizer", optimizer, ("adam", "sgd")),
            ("solver", solver, ("emd", "sinkhorn")),
            ("parametrisation", parametrisation, ("projection", "softmax")),
            ("aggregation", aggregation, ("avg", "weighted", "random")),
            ("atom_batches", atom_batches, ("contiguous", "shuffled")),
        ):
            if choice not in allowed:
                raise ValueError(f"FedDaDiL: field '{field}' must be one of {allowed}, got {choice!r}")
        if atom_epochs < 1 or barycenter_iters < 1:
            raise ValueError("FedDaDiL: fields 'atom_epochs' and 'barycenter_iters' must be at least 1")
        if lr <= 0 or (coordinate_lr is not None and coordinate_lr <= 0) or (beta is not None and beta < 0):
            raise ValueError(
                "FedDaDiL: fields 'lr' and 'coordinate_lr' must be positive and 'beta' non-negative,"
                f" got {lr}, {coordinate_lr}, {beta}"
            )
        if hidden_dims and encoder_checkpoint is None and encoder_config is None:
            raise ValueError(
                "FedDaDiL: field 'hidden_dims' describes a step-1 encoder; give its 'encoder_checkpoint' or"
                " 'encoder_config'"
            )
        self.save_hyperparameters()
        self.num_atoms = num_atoms
        self.atom_size = atom_size
        self.batch_size = batch_size
        self.atom_epochs = atom_epochs
        self.target = target
        self.hidden_dims = tuple(hidden_dims)
        self.encoder_checkpoint = encoder_checkpoint
        self.encoder_config = encoder_config
        self.labelling = labelling
        self.optimizer_name = optimizer
        self.lr = lr
        self.coordinate_lr = lr if coordinate_lr is None else coordinate_lr
        self.keep_optimizer_state = keep_optimizer_state
        self.atom_batching = atom_batches
        self.log_coordinates = log_coordinates
        self.beta = beta
        self.solver = solver
        self.reg = reg
        self.barycenter_iters = barycenter_iters
        self.barycenter_tol = barycenter_tol
        self.parametrisation = parametrisation
        self.atom_seed = atom_seed
        self.classifier_weight_decay = classifier_weight_decay
        self.aggregation = aggregation
        self._data: tuple[Tensor, Tensor] | None = None
        self._batches: list[Tensor] = []
        self._step = 0
        self._labellers: _Labellers | None = None

    # ---------------------------------------------------------------- layers
    def required_runs(self) -> list[str]:
        """Configs of the runs whose checkpoints this module reads: step 1's, when ``encoder_config`` is given."""
        return [self.encoder_config] if self.encoder_config is not None else []

    def configure_model(self) -> None:
        """The frozen encoder (and step-1 head), the atoms and the coordinates (once)."""
        if hasattr(self, "atom_features"):
            return
        spec = self.spec
        c = spec.num_classes
        self.body, width = mlp(spec.input_dim, self.hidden_dims)
        self.head: nn.Linear | None = None
        checkpoint = self.encoder_checkpoint
        if checkpoint is None and self.encoder_config is not None:
            checkpoint = str(config_root(self.encoder_config))  # the step-1 run folder: its latest checkpoint
        if checkpoint is not None:
            state = load_step1_state(checkpoint)
            if "head.weight" in state:
                self.head = nn.Linear(width, c)
            missing = self.load_state_dict(state, strict=False).missing_keys
            if any(name.startswith(("body.", "head.")) for name in missing):
                raise ValueError(
                    f"FedDaDiL: {checkpoint!r} does not hold an MLP encoder of hidden_dims"
                    f" {list(self.hidden_dims)} for client '{spec.client_id}' (missing {missing})"
                )
        if self.labelling == "source_only" and self.head is None:
            raise ValueError(
                f"FedDaDiL: field 'labelling' is 'source_only' but client '{spec.client_id}' has no step-1 head (give"
                " an 'encoder_checkpoint' or 'encoder_config' whose model has one)"
            )
        z, y = init_dictionary(self.num_atoms, self.atom_size, width, c, torch.Generator().manual_seed(self.atom_seed))
        softmax = self.parametrisation == "softmax"
        self.atom_features = nn.Parameter(z)
        self.atom_labels = nn.Parameter(y * LABEL_LOGIT if softmax else y)
        self.coordinates = nn.Parameter(
            torch.zeros(self.num_atoms) if softmax else torch.full((self.num_atoms,), 1 / self.num_atoms)
        )

    def setup_client(self, spec: ClientSpec) -> None:
        """Remember the client (the labelling classifiers of the previous one no longer apply)."""
        super().setup_client(spec)
        self._labellers = None

    @property
    def labelled(self) -> bool:
        """Whether this client's labels take part in training (every client but the target)."""
        return self.spec.client_id != self.target

    def alpha(self) -> Tensor:
        r"""The barycentric coordinates :math:`\alpha \in \Delta_K`, shape ``(K,)``."""
        return torch.softmax(self.coordinates, 0) if self.parametrisation == "softmax" else self.coordinates

    def atom_probabilities(self) -> Tensor:
        """The atoms' soft labels, shape ``(K, n, c)``, rows in the simplex."""
        return torch.softmax(self.atom_labels, -1) if self.parametrisation == "softmax" else self.atom_labels

    @torch.no_grad()
    def features(self, x: Tensor) -> Tensor:
        """Encoder features, shape ``(B, d)``, of inputs of shape ``(B, *input_shape)``."""
        return cast(Tensor, self.body(x))

    def configure_callbacks(self) -> list[Callback]:
        """The server step: :class:`~fedhet.callbacks.DictionaryAveraging` with the configured rule."""
        return [DictionaryAveraging(rule=self.aggregation)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD (the paper's step) or Adam on atoms and coordinates; with projection, steps end on the simplices."""
        groups = [
            {"params": [self.atom_features, self.atom_labels], "lr": self.lr},
            {"params": [self.coordinates], "lr": self.coordinate_lr},
        ]
        if self.optimizer_name == "adam":
            optimizer: torch.optim.Optimizer = torch.optim.Adam(groups, lr=self.lr)
        else:
            optimizer = torch.optim.SGD(groups, lr=self.lr)
        if self.parametrisation == "projection":
            optimizer.register_step_post_hook(lambda *_: self._project())
        return optimizer

    @torch.no_grad()
    def _project(self) -> None:
        self.coordinates.copy_(project_simplex(self.coordinates))
        self.atom_labels.copy_(project_simplex(self.atom_labels))

    # ---------------------------------------------------------------- local schedule
    def local_phases(self) -> list[LocalPhase]:
        """``atom_epochs`` passes over the atoms in mini-batches of ``batch_size``; the encoder stays frozen."""
        steps = self.atom_epochs * math.ceil(self.atom_size / self.batch_size)
        return [LocalPhase("dictionary", trainable=("atom_*", "coordinates"), steps=steps)]

    def on_train_start(self) -> None:
        """Encode the client's training data once per round (the encoder is frozen)."""
        features, labels = [], []
        for x, y in self.train_batches():
            features.append(self.features(x.to(self.device)))
            labels.append(y.to(self.device))
        self._data = (torch.cat(features), torch.cat(labels))
        self._step = 0
        self._labellers = None

    def on_train_end(self) -> None:
        """Drop the cached features; the dictionary changed, so do the labelling classifiers."""
        super().on_train_end()
        self._data = None
        self._labellers = None

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One DaDiL step on the next atom mini-batch and a fresh client mini-batch (the loader only paces steps)."""
        if self._data is None:
            raise RuntimeError("FedDaDiL: training_step before on_train_start encoded the client's data")
        z_all, y_all = self._data
        position = self._step % math.ceil(self.atom_size / self.batch_size)
        if position == 0:
            self._batches = atom_batches(self.atom_size, self.batch_size, self.device)
            if self.atom_batching == "shuffled":
                order = torch.randperm(self.atom_size, device=self.device)
                self._batches = [order[batch] for batch in self._batches]
        self._step += 1
        atoms = self._batches[position]
        c = self.spec.num_classes
        if self.labelled:
            rows = class_balanced_indices(y_all, c, max(1, self.batch_size // c))
            y = F.one_hot(y_all[rows], c).to(z_all.dtype)
        else:
            rows = torch.randperm(len(z_all), device=self.device)[: self.batch_size]
            y = None
        loss = dictionary_loss(
            z_all[rows],
            self.atom_features[:, atoms],
            self.atom_probabilities()[:, atoms],
            self.alpha(),
            y,
            n_iter=self.barycenter_iters,
            tol=self.barycenter_tol,
            beta=self.beta,
            solver=self.solver,
            reg=self.reg,
        )
        self.log("train/loss", loss, prog_bar=True)
        return loss

    # ---------------------------------------------------------------- what leaves the client
    def client_statistics(self) -> dict[str, Tensor]:
        r"""The client's atom version: features ``(K, n, d)`` and labels ``(K, n, c)``; never :math:`\alpha`."""
        return {ATOM_NAMES[0]: self.atom_features.detach(), ATOM_NAMES[1]: self.atom_labels.detach()}

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """The client's atom version, shaped as the dictionary (:func:`~fedhet.callbacks.feddadil.feddadil_upload`)."""
        return feddadil_upload(TensorSpec.of(self.atom_features), TensorSpec.of(self.atom_labels))

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """Replace the local atom version with the server's global dictionary."""
        if GLOBAL_NAMES[0] not in statistics:
            return
        with torch.no_grad():
            self.atom_features.copy_(statistics[GLOBAL_NAMES[0]])
            self.atom_labels.copy_(statistics[GLOBAL_NAMES[1]])
        self._labellers = None

    # ---------------------------------------------------------------- labelling and evaluation
    def labellers(self) -> _Labellers:
        """DaDiL-E's per-atom classifiers and DaDiL-R's classifier on the reconstruction, fitted once per dictionary."""
        if self._labellers is None:
            atoms_z, atoms_y = self.atom_features.detach(), self.atom_probabilities().detach()
            fits = [
                fit_softmax_regression(z, y, self.classifier_weight_decay)
                for z, y in zip(atoms_z, atoms_y, strict=True)
            ]
            support_z, support_y = self.reconstruct()
            weight, bias = fit_softmax_regression(support_z, support_y, self.classifier_weight_decay)
            self._labellers = _Labellers(
                torch.stack([w for w, _ in fits]), torch.stack([b for _, b in fits]), weight, bias
            )
        return self._labellers

    def reconstruct(self, support_size: int | None = None) -> tuple[Tensor, Tensor]:
        r"""The client's labelled barycenter :math:`B(\alpha; P)` with ``support_size`` points (default :math:`n`)."""
        support_z, support_y = wasserstein_barycenter(
            self.atom_features.detach(),
            self.alpha().detach(),
            self.atom_probabilities().detach(),
            support_size or self.atom_size,
            n_iter=self.barycenter_iters,
            tol=self.barycenter_tol,
            beta=self.beta,
            solver=self.solver,
            reg=self.reg,
            generator=torch.Generator().manual_seed(self.atom_seed),
        )
        if support_y is None:  # labelled atoms always give a labelled support
            raise RuntimeError("FedDaDiL.reconstruct: the barycenter of labelled atoms came back without labels")
        return support_z, support_y

    def _evaluation_step(self, batch: tuple[Tensor, Tensor], stage: str) -> None:
        x, y = batch
        z = self.features(x)
        labellers = self.labellers()
        ensemble = ensemble_probabilities(z, labellers.atom_weights, labellers.atom_biases, self.alpha().detach())
        reconstruction = z @ labellers.weight.T + labellers.bias
        metrics = self.evaluation_metrics(stage)
        outputs = {"e": ensemble, "r": reconstruction}
        if self.head is not None:
            outputs["source_only"] = self.head(z)
            metrics["acc_source_only"].update(outputs["source_only"], y)
        metrics["acc_e"].update(ensemble, y)
        metrics["acc_r"].update(reconstruction, y)
        metrics["acc"].update(outputs[self.labelling], y)
        # the tuning criterion is never updated from the target's labels; the result, only from them
        metrics["source_acc" if self.labelled else "target_acc"].update(outputs[self.labelling], y)
        if self.log_coordinates:
            for k, value in enumerate(self.alpha().detach()):
                metrics[f"alpha_{k}"].update(value)

    def on_validation_start(self) -> None:
        """Under a plain Trainer: refit the labelling classifiers for the current dictionary."""
        self._labellers = None

    on_test_start = on_validation_start

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the validation metrics."""
        self._evaluation_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the test metrics."""
        self._evaluation_step(batch, "test")

    def configure_metrics(self, stage: str) -> MetricCollection:
        """The accuracies of ``stage`` (see the class docstring), never reduced across processes."""
        names = ["acc", "acc_e", "acc_r", "source_acc", "target_acc"]
        names += ["acc_source_only"] if self.head is not None else []
        metrics: dict[str, Metric | MetricCollection] = {
            name: MulticlassAccuracy(self.spec.num_classes, average="micro", sync_on_compute=False) for name in names
        }
        if self.log_coordinates:
            metrics.update({f"alpha_{k}": MeanMetric(sync_on_compute=False) for k in range(self.num_atoms)})
        return MetricCollection(metrics)
