"""Six real heart-disease tables bundled with fedhet, one per hospital or study, as naturally federated clients.

Sources and licences (the files are in ``data/``; ``data/SOURCES.md`` has their checksums):

* ``cleveland``, ``hungarian``, ``switzerland``, ``va``: the four sites of the UCI "Heart Disease" data set
  (Janosi, Steinbrunn, Pfisterer and Detrano, 1988; https://archive.ics.uci.edu/dataset/45/heart+disease), the
  13 attributes of the ``processed.*.data`` files. CC BY 4.0. The donors ask that publications name the principal
  investigators: Andras Janosi (Hungarian Institute of Cardiology, Budapest), William Steinbrunn (University Hospital
  Zurich), Matthias Pfisterer (University Hospital Basel), Robert Detrano (V.A. Medical Center Long Beach and
  Cleveland Clinic Foundation).
* ``saheart``: South African Heart Disease data (Rousseauw et al. 1983, "Coronary risk factor screening in three
  rural communities", South African Medical Journal 64), as distributed with Hastie, Tibshirani and Friedman, *The
  Elements of Statistical Learning*; no explicit licence, freely redistributed teaching data.
* ``faisalabad``: UCI "Heart failure clinical records" (Chicco and Jurman 2020, BMC Medical Informatics and Decision
  Making 20:16; data of Ahmad et al. 2017, PLoS ONE 12(7), Faisalabad Institute of Cardiology). CC BY 4.0.

**Label convention: 1 = disease / event, 0 = none**, at every site. The UCI sites' files store ``target = 1`` for
*no* disease (``num == 0``), so the loader returns ``1 - target`` (``num > 0``, angiographic disease); SAheart's
``target`` is ``chd`` (coronary heart disease) and Faisalabad's is ``DEATH_EVENT``, both kept as they are.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.datasets._common import fit_standardizer, holdout_split, vendored_bytes
from fedhet.datamodules.splits import SplitFederation

MissingStrategy = Literal["code", "impute", "indicator"]

UCI_SITES: tuple[str, ...] = ("cleveland", "hungarian", "switzerland", "va")
"""The four UCI Heart Disease sites; they share the same 13 columns."""

GL_SITES: tuple[str, ...] = ("cleveland", "saheart", "faisalabad")
"""The three clients of the Global Layers heart experiment; each has its own columns (13, 9 and 12)."""

SITES: tuple[str, ...] = (*UCI_SITES, "saheart", "faisalabad")
"""Every site :func:`load_heart` knows."""

UCI_COLUMNS: tuple[str, ...] = (
    "age",
    "sex",
    "cp",
    "trestbps",
    "chol",
    "fbs",
    "restecg",
    "thalach",
    "exang",
    "oldpeak",
    "slope",
    "ca",
    "thal",
)
"""The 13 UCI Heart Disease attributes, in file order; categorical codes (``cp``, ``restecg``, ``slope``, ``thal``)
are kept as numbers, as in the Global Layers reference."""

UCI_MAY_BE_MISSING: tuple[str, ...] = UCI_COLUMNS[3:]
"""UCI columns that some site leaves unrecorded; ``missing="indicator"`` adds one 0/1 column for each."""

_FILES = {
    "cleveland": "cleveland.csv",
    "hungarian": "hungarian.csv",
    "switzerland": "switzerland.csv",
    "va": "va.csv",
    "saheart": "sa.csv",
    "faisalabad": "faisalabad.csv",
}

_FAMHIST = {"Absent": 0.0, "Present": 1.0}
_UNSCALED = frozenset({"famhist"})  # ordinal-encoded, not standardised, placed last (as the GL reference does)
_ZERO_MEANS_MISSING = frozenset({"trestbps", "chol"})  # 0 mm Hg / 0 mg/dl: unrecorded (Switzerland, VA)
# Switzerland rows whose oldpeak is a genuine -1.0 mm, not the missing code (checked against the UCI original).
_GENUINE_MINUS_ONE = {("switzerland", "oldpeak"): (58, 59)}


@dataclass(frozen=True)
class HeartData:
    """One heart site's table as stored, with its labels in the convention 1 = disease / event.

    Attributes:
        site: the site's name, one of :data:`SITES`.
        x: features as in the file, shape ``(N, F)``, ``float32``; SAheart's ``famhist`` is encoded Absent = 0,
            Present = 1; UCI cells that were not recorded hold the file's code, -1 (or 0 for ``trestbps``/``chol``).
        y: labels, shape ``(N,)``, ``int64``: 1 = disease (UCI ``num > 0``; SAheart ``chd``) or death event
            (Faisalabad), 0 otherwise.
        missing: ``True`` where a cell was not recorded, shape ``(N, F)``.
        feature_names: the ``F`` column names, in order.

    """

    site: str
    x: Tensor
    y: Tensor
    missing: Tensor
    feature_names: tuple[str, ...]

    @property
    def num_features(self) -> int:
        """Number of columns ``F``."""
        return len(self.feature_names)


@cache
def _read_site(site: str) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Parse a bundled site file once: column names, raw values, labels (1 = disease/event) and missing mask."""
    text = vendored_bytes(_FILES[site]).decode("utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], [row for row in rows[1:] if row]
    names = tuple(header[:-1])
    values = np.array(
        [
            [_FAMHIST[cell] if name == "famhist" else float(cell) for name, cell in zip(names, row[:-1], strict=True)]
            for row in body
        ],
        dtype=np.float32,
    )
    target = np.array([int(row[-1]) for row in body], dtype=np.int64)
    missing = np.zeros(values.shape, dtype=bool)
    if site in UCI_SITES:
        target = 1 - target  # the files store 1 = no disease; we expose 1 = disease
        for j, name in enumerate(names):
            missing[:, j] = values[:, j] == -1
            if name in _ZERO_MEANS_MISSING:
                missing[:, j] |= values[:, j] == 0
            missing[list(_GENUINE_MINUS_ONE.get((site, name), ())), j] = False
    for array in (values, target, missing):
        array.flags.writeable = False
    return names, values, target, missing


def load_heart(site: str) -> HeartData:
    """Load one bundled heart-disease site, with labels in the convention 1 = disease / event.

    See the module docstring for the sources (UCI Heart Disease, CC BY 4.0; SAheart from *The Elements of Statistical
    Learning*; UCI Heart failure clinical records, CC BY 4.0). The file's sha256 is checked on first read.

    ======================  =====  ======================================================  ========================
    site                    rows   columns (F)                                             positives (1)
    ======================  =====  ======================================================  ========================
    ``cleveland``           303    13 UCI attributes                                       139 (disease)
    ``hungarian``           294    13 UCI attributes                                       106
    ``switzerland``         123    13 UCI attributes                                       115
    ``va``                  200    13 UCI attributes                                       149
    ``saheart``             462    sbp, tobacco, ldl, adiposity, famhist, typea, obesity,  160 (CHD)
                                   alcohol, age (9)
    ``faisalabad``          299    age, anaemia, creatinine_phosphokinase, diabetes,       96 (death event)
                                   ejection_fraction, high_blood_pressure, platelets,
                                   serum_creatinine, serum_sodium, sex, smoking, time (12)
    ======================  =====  ======================================================  ========================

    Missing values (UCI sites only): a cell is missing when it holds -1, or 0 in ``trestbps``/``chol`` (the
    Switzerland and VA files record unmeasured cholesterol as 0), except two Switzerland rows whose ``oldpeak`` really
    is -1.0. Cleveland has 6 missing cells (``ca`` 4, ``thal`` 2); Switzerland has no cholesterol at all.

    Args:
        site: one of :data:`SITES`.

    Returns:
        the site's features ``x`` (``N x F``), labels ``y`` (``N``), missing mask and column names; fresh tensors.

    Raises:
        ValueError: for an unknown site.

    Example:
        >>> data = load_heart("cleveland")
        >>> tuple(data.x.shape), int(data.y.sum()), int(data.missing.sum())
        ((303, 13), 139, 6)

    """
    if site not in _FILES:
        raise ValueError(f"unknown heart site {site!r}; expected one of {list(SITES)}")
    names, values, target, missing = _read_site(site)
    return HeartData(
        site=site,
        x=torch.tensor(values),
        y=torch.tensor(target),
        missing=torch.tensor(missing),
        feature_names=names,
    )


def prepare_heart_features(
    data: HeartData, fit_rows: Tensor | np.ndarray, missing: MissingStrategy = "impute", standardize: bool = True
) -> tuple[Tensor, tuple[str, ...]]:
    """Encode a heart site's features with statistics fitted on ``fit_rows`` only (its training split).

    Every column except ``famhist`` is standardised (``StandardScaler``: mean and population standard deviation of the
    fitting rows; a constant column is only centred); ``famhist`` stays 0/1 and moves to the end, as the Global Layers
    reference's ``ColumnTransformer`` places it. Unrecorded cells are handled by ``missing``:

    * ``"code"``: kept as the file's numbers (-1, or 0 in ``trestbps``/``chol``) and standardised with the rest,
      as the Global Layers reference does;
    * ``"impute"``: replaced by the mean of the column's recorded values in ``fit_rows`` (0 after standardisation;
      0 if the column has no recorded value there);
    * ``"indicator"``: imputed as above, plus one 0/1 column ``<name>_missing`` per column of
      :data:`UCI_MAY_BE_MISSING` (10 more columns) at the UCI sites; other sites have no missing cells and get none.

    Args:
        data: the site, from :func:`load_heart`.
        fit_rows: the rows to fit the statistics on, e.g. the training split's indices.
        missing: ``"code"``, ``"impute"`` or ``"indicator"``.
        standardize: whether to standardise; when ``False`` values stay in their units (imputation still uses the
            fitting rows' mean).

    Returns:
        every row's encoded features, shape ``(N, F')`` (``float32``), and the ``F'`` column names in order.

    Raises:
        ValueError: for an unknown ``missing`` strategy.

    Example:
        >>> data = load_heart("saheart")
        >>> x, names = prepare_heart_features(data, fit_rows=torch.arange(300))
        >>> tuple(x.shape), names[-1]
        ((462, 9), 'famhist')

    """
    if missing not in ("code", "impute", "indicator"):
        raise ValueError(f"`missing` must be 'code', 'impute' or 'indicator', got {missing!r}")
    rows = torch.as_tensor(np.asarray(fit_rows), dtype=torch.long)
    scaled = [j for j, name in enumerate(data.feature_names) if name not in _UNSCALED]
    kept = [j for j, name in enumerate(data.feature_names) if name in _UNSCALED]
    x = data.x[:, scaled].clone()
    observed = torch.ones_like(x, dtype=torch.bool) if missing == "code" else ~data.missing[:, scaled]
    mean, scale = fit_standardizer(x[rows], observed[rows])
    if not standardize:
        scale = torch.ones_like(scale)
    x = torch.where(observed, x, mean)
    if standardize:
        x = (x - mean) / scale
    columns = [x, data.x[:, kept]]
    names = [data.feature_names[j] for j in scaled] + [data.feature_names[j] for j in kept]
    if missing == "indicator" and data.site in UCI_SITES:
        flagged = [data.feature_names.index(name) for name in UCI_MAY_BE_MISSING]
        columns.append(data.missing[:, flagged].float())
        names += [f"{name}_missing" for name in UCI_MAY_BE_MISSING]
    return torch.cat(columns, dim=1).float(), tuple(names)


class _HeartConfig(Protocol):
    """The arguments :class:`HeartFederation` keeps in ``self.hparams`` (read by attribute)."""

    missing: MissingStrategy
    standardize: bool
    test_fraction: float
    val_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class HeartFederation(SplitFederation):
    """Naturally federated heart-disease data: one client per hospital or study, each with its own columns.

    Client ids are the site names. Labels follow one convention, **1 = disease / event** (see :func:`load_heart`);
    ``num_classes`` is 2. Each site is split at random into train, validation and test rows exactly as scikit-learn's
    ``train_test_split`` is called twice by the Global Layers reference (:func:`holdout_split`, with the same ``seed``
    at every site); features are then encoded by :func:`prepare_heart_features` **fitted on the client's own
    training split only**, so nothing from its validation or test rows, or from another client, leaks in.

    Two presets:

    * ``sites=UCI_SITES`` (the default): Cleveland, Hungarian, Switzerland and VA, which share the 13 UCI columns
      (23 with ``missing="indicator"``), so every client has the same input dimension;
    * ``sites=GL_SITES``: Cleveland, SAheart and Faisalabad, the Global Layers experiment, with disjoint columns and
      input dimensions 13, 9 and 12. Use ``missing="code"`` to encode as the reference does; note that the reference
      labels Cleveland 1 = *no* disease, so its positive-class metrics (precision, recall, F1, AUPRC) are computed
      on ``1 - y`` here (AUROC and balanced accuracy are unchanged).

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        sites: the sites to include, each at most once, from :data:`SITES`.
        missing: how unrecorded cells are encoded: ``"code"``, ``"impute"`` or ``"indicator"``.
        standardize: whether to standardise the features with the client's training statistics.
        test_fraction: share of each site's rows held out for testing (rounded up).
        val_fraction: share of the remaining rows held out for validation (rounded up).
        seed: seed of every site's split.

    Example:
        >>> federation = HeartFederation(sites=["cleveland", "saheart", "faisalabad"])
        >>> [(spec.input_dim, spec.num_train, spec.num_val, spec.num_test) for spec in federation.specs.values()]
        [(13, 182, 21, 100), (9, 278, 31, 153), (12, 180, 20, 99)]

    """

    def __init__(
        self,
        sites: Sequence[str] = UCI_SITES,
        missing: MissingStrategy = "impute",
        standardize: bool = True,
        test_fraction: float = 0.33,
        val_fraction: float = 0.1,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__(val_of_rest=True)
        unknown = [site for site in sites if site not in _FILES]
        if unknown:
            raise ValueError(f"unknown heart sites {unknown}; expected some of {list(SITES)}")
        if len(set(sites)) != len(sites) or not sites:
            raise ValueError(f"`sites` must name at least one site, each once; got {list(sites)}")
        if missing not in ("code", "impute", "indicator"):
            raise ValueError(f"`missing` must be 'code', 'impute' or 'indicator', got {missing!r}")
        self.sites = tuple(sites)
        self._split_rows: dict[str, dict[str, np.ndarray]] = {}
        self._feature_names: dict[str, tuple[str, ...]] = {}

    @property
    def declared_num_clients(self) -> int:
        """One client per site, known before any data is read."""
        return len(self.sites)

    @property
    def split_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Each client's rows of :func:`load_heart` in its ``"train"``, ``"val"`` and ``"test"`` splits, by site."""
        self.setup()
        return {site: dict(parts) for site, parts in self._split_rows.items()}

    @property
    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Each client's encoded column names, in feature order, by site."""
        self.setup()
        return dict(self._feature_names)

    def build_clients(self) -> list[ClientDataModule]:
        """Load, split and encode every site.

        Returns:
            one client per site, in the order of ``sites``.

        """
        config = cast(_HeartConfig, self.hparams)
        clients = []
        for site in self.sites:
            data = load_heart(site)
            train, val, test = holdout_split(len(data.y), config.test_fraction, config.val_fraction, config.seed)
            x, names = prepare_heart_features(data, train, config.missing, config.standardize)
            self._split_rows[site] = {"train": train, "val": val, "test": test}
            self._feature_names[site] = names
            part = {name: torch.from_numpy(rows) for name, rows in (("train", train), ("val", val), ("test", test))}
            held_out = held_out_splits((x[part["val"]], data.y[part["val"]]), (x[part["test"]], data.y[part["test"]]))
            clients.append(
                ClientDataModule(
                    site,
                    x[part["train"]],
                    data.y[part["train"]],
                    2,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=config.seed,
                    **held_out,
                )
            )
        return clients
