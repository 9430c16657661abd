"""Multi-source domain adaptation federations: one client per domain, one of them the (unlabelled) target.

Every federation here can leave its target out (``include_target=False``), which gives the source-only federation
of FedDaDiL's step 1 (FedAvg on the labelled sources), and keeps it in otherwise (step 2, where the target's labels
only serve evaluation). Domains:

* :class:`RotatedBlobsDomains`: the DaDiL toy, two 2-d Gaussian classes whose offset turns from domain to domain;
* :class:`DigitsDomains`: the real digit sources of :class:`~fedhet.datamodules.DigitsFamilyFederation` (MNIST-5k,
  UCI pixels, scikit-learn digits) resampled to one common grid;
* :class:`DigitsTransformDomains`: scikit-learn's digits split into four parts, each under its own transform.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.datasets._common import derived_seed
from fedhet.datamodules.datasets.digits_family import check_digit_sources, load_digit_source
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.feature_spaces import resample_images

TRANSFORMS = ("identity", "rot90", "invert", "noise")
"""The domains of :class:`DigitsTransformDomains`, in client order."""


class _DomainConfig(Protocol):
    """The arguments every domain federation keeps in ``self.hparams`` (read by attribute)."""

    target: str | None
    include_target: bool
    val_fraction: float
    test_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class _BlobsConfig(_DomainConfig, Protocol):
    """The ``self.hparams`` of :class:`RotatedBlobsDomains`."""

    angles: Sequence[float]
    samples_per_class: int


class _DigitsConfig(_DomainConfig, Protocol):
    """The ``self.hparams`` of :class:`DigitsDomains`."""

    sources: Sequence[str]
    grid: Sequence[int]
    crop_mnist: bool
    max_samples: int | None


class _DomainFederation(SplitFederation):
    """What the domain federations share: the target switch and one client per domain.

    Subclasses take ``target``, ``include_target`` and the split arguments, call ``super().__init__()`` and implement
    :meth:`domains`.
    """

    def domains(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Every domain's ``(features, labels)``, by client id, in client order."""
        raise NotImplementedError

    def num_domain_classes(self) -> int:
        """Size of the label space."""
        return 10

    def build_clients(self) -> list[ClientDataModule]:
        """One client per domain; the target is left out when ``include_target`` is false.

        Raises:
            ValueError: when ``target`` names no domain.

        """
        config = cast(_DomainConfig, self.hparams)
        domains = self.domains()
        if config.target is not None and config.target not in domains:
            raise ValueError(f"field 'target' is {config.target!r}; the domains are {list(domains)}")
        return [
            ClientDataModule(
                client_id,
                x,
                y,
                self.num_domain_classes(),
                val_fraction=config.val_fraction,
                test_fraction=config.test_fraction,
                batch_size=config.batch_size,
                eval_batch_size=config.eval_batch_size,
                seed=derived_seed(config.seed, index),
            )
            for index, (client_id, (x, y)) in enumerate(domains.items())
            if config.include_target or client_id != config.target
        ]


class RotatedBlobsDomains(_DomainFederation):
    r"""The DaDiL toy: two Gaussian classes in 2-d, the second the first shifted by :math:`6(\cos\theta, \sin\theta)`.

    Domain :math:`\theta` draws ``samples_per_class`` points :math:`x \sim \mathcal{N}(0, \Sigma_\theta)` for class 0
    and the same points shifted by :math:`6(\cos\theta, \sin\theta)` for class 1, with
    :math:`\Sigma_\theta = s A^\top A + I`, :math:`A` standard normal per domain, :math:`s = 0.25` for sources and
    :math:`0.1` for the target (Montesuma et al., DaDiL, ECAI 2023; FedDaDiL spec, experiment A). Client ids are
    ``theta<angle>``.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        angles: one angle in degrees per domain.
        target: client id of the target domain (``None``: no target).
        include_target: keep the target client.
        samples_per_class: points per class and domain.
        seed: seed of every draw.

    Example:
        >>> toy = RotatedBlobsDomains(include_target=False, samples_per_class=10)
        >>> toy.client_ids, toy.specs["theta0"].input_shape
        (['theta0', 'theta15', 'theta30'], (2,))

    """

    def __init__(
        self,
        angles: Sequence[float] = (0, 15, 30, 45),
        target: str | None = "theta45",
        include_target: bool = True,
        samples_per_class: int = 400,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 128,
        eval_batch_size: int = 512,
        seed: int = 15,
    ) -> None:
        super().__init__()
        if samples_per_class < 2:
            raise ValueError(f"field 'samples_per_class' must be at least 2, got {samples_per_class}")

    def num_domain_classes(self) -> int:
        """Two classes."""
        return 2

    def domains(self) -> dict[str, tuple[Tensor, Tensor]]:
        """The blobs of every angle."""
        config = cast(_BlobsConfig, self.hparams)
        rng = np.random.default_rng(config.seed)
        out = {}
        for angle in config.angles:
            client_id = f"theta{angle:g}"
            a = rng.standard_normal((2, 2))
            covariance = (0.1 if client_id == config.target else 0.25) * a.T @ a + np.eye(2)
            class0 = rng.multivariate_normal(np.zeros(2), covariance, size=config.samples_per_class)
            radians = math.radians(angle)
            class1 = class0 + 6.0 * np.array([math.cos(radians), math.sin(radians)])
            x = torch.as_tensor(np.concatenate([class0, class1]), dtype=torch.float32)
            y = torch.arange(2).repeat_interleave(config.samples_per_class)
            out[client_id] = (x, y)
        return out


class DigitsDomains(_DomainFederation):
    """Real handwritten digits from three sources, one domain each, all resampled to one grid for one encoder.

    The sources of :func:`~fedhet.datamodules.datasets.load_digit_source` (MNIST-5k 28x28, UCI pixels 16x15,
    scikit-learn 8x8, pixels in ``[0, 1]``) are resampled bilinearly (with anti-aliasing) to ``grid``; client ids are
    the source names. With one source as ``target``, the others are the labelled sources of a leave-one-domain-out
    task.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        sources: the domains, from ``"mnist5k"``, ``"mfeat_pix"``, ``"sklearn_digits"``.
        target: client id of the target domain (``None``: no target).
        include_target: keep the target client.
        grid: the common image size ``(H, W)``.
        crop_mnist: drop MNIST's 4-pixel empty margin first (its digits fill a 20x20 box; the other sources' digits
            fill their frame), so that the domains differ in writers and resolution rather than in framing.
        max_samples: keep at most this many samples of a source (a random subset; ``None``: all).
        seed: seed of the subsets and splits.

    """

    def __init__(
        self,
        sources: Sequence[str] = ("mnist5k", "mfeat_pix", "sklearn_digits"),
        target: str | None = "mnist5k",
        include_target: bool = True,
        grid: Sequence[int] = (16, 16),
        crop_mnist: bool = True,
        max_samples: int | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_digit_sources(sources)

    def domains(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Every source at the common grid."""
        config = cast(_DigitsConfig, self.hparams)
        out = {}
        for index, source in enumerate(config.sources):
            data = load_digit_source(source)
            x, y = data.x, data.y
            if source == "mnist5k" and config.crop_mnist:
                x = x[..., 4:24, 4:24]
            if config.max_samples is not None and len(x) > config.max_samples:
                order = np.random.default_rng(derived_seed(config.seed, 100 + index)).permutation(len(x))
                rows = torch.from_numpy(np.sort(order[: config.max_samples]))
                x, y = x[rows], y[rows]
            out[source] = (resample_images(x, tuple(config.grid), antialias=True), y)
        return out


class DigitsTransformDomains(_DomainFederation):
    """scikit-learn's 1,797 digits dealt into four disjoint parts, each seen through its own transform.

    Domains (FedDaDiL spec, experiment B), pixels in ``[0, 1]``: ``identity``; ``rot90`` (the 8x8 image turned a
    quarter); ``invert`` (``1 - x``); ``noise`` (additive Gaussian noise of standard deviation 0.25, i.e. 4 grey levels
    of 16). Samples are ``(1, 8, 8)`` images.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        target: client id of the target domain (``None``: no target).
        include_target: keep the target client.
        seed: seed of the deal, the noise and the splits.

    """

    def __init__(
        self,
        target: str | None = "rot90",
        include_target: bool = True,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()

    def domains(self) -> dict[str, tuple[Tensor, Tensor]]:
        """The four transformed parts."""
        data = load_digit_source("sklearn_digits")
        rng = np.random.default_rng(cast(_DomainConfig, self.hparams).seed)
        parts = np.array_split(rng.permutation(len(data.x)), len(TRANSFORMS))
        out = {}
        for name, rows in zip(TRANSFORMS, parts, strict=True):
            picked = torch.from_numpy(np.sort(rows))
            x = data.x[picked]
            if name == "rot90":
                x = torch.rot90(x, 1, dims=(-2, -1))
            elif name == "invert":
                x = 1.0 - x
            elif name == "noise":
                x = x + 0.25 * torch.as_tensor(rng.standard_normal(x.shape), dtype=x.dtype)
            out[name] = (x, data.y[picked])
        return out
