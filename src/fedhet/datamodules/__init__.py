"""Federated data: one LightningDataModule per client, the federation that holds them, and bundled datasets."""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.core import ClientSpec
    from fedhet.datamodules.client import ClientDataModule
    from fedhet.datamodules.csv_client import CSVClientDataModule
    from fedhet.datamodules.csv_federation import CSVFederation
    from fedhet.datamodules.datasets import (
        CovertypeFederation,
        DigitsFamilyFederation,
        HeartFederation,
        MultipleFeaturesFederation,
        SatelliteFederation,
        SensorCovarianceFederation,
        VowelFederation,
    )
    from fedhet.datamodules.digits import DigitsFederation
    from fedhet.datamodules.domain_data import DomainFederation
    from fedhet.datamodules.domains import DigitsDomains, DigitsTransformDomains, RotatedBlobsDomains
    from fedhet.datamodules.federated import FederatedDataModule
    from fedhet.datamodules.hybrid import HybridFederation
    from fedhet.datamodules.partitioned import PartitionedFederation
    from fedhet.datamodules.splits import SplitFederation
    from fedhet.datamodules.synthetic import LinearMappingToy, NoisyFeaturesToy
    from fedhet.datamodules.tensor_dataset import TensorBatchLoader, TensorPairDataset, collate_batched

__all__ = [
    "CSVClientDataModule",
    "CSVFederation",
    "ClientDataModule",
    "ClientSpec",
    "CovertypeFederation",
    "DigitsDomains",
    "DigitsFamilyFederation",
    "DigitsFederation",
    "DigitsTransformDomains",
    "DomainFederation",
    "FederatedDataModule",
    "HeartFederation",
    "HybridFederation",
    "LinearMappingToy",
    "MultipleFeaturesFederation",
    "NoisyFeaturesToy",
    "PartitionedFederation",
    "RotatedBlobsDomains",
    "SatelliteFederation",
    "SensorCovarianceFederation",
    "SplitFederation",
    "TensorBatchLoader",
    "TensorPairDataset",
    "VowelFederation",
    "collate_batched",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
