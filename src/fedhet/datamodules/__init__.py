"""Federated data: one LightningDataModule per client, the federation that holds them, and bundled datasets."""

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.digits import DigitsFederation
from fedhet.datamodules.federated import FederatedDataModule
from fedhet.datamodules.spec import ClientSpec
from fedhet.datamodules.tensor_dataset import TensorPairDataset, collate_batched

__all__ = [
    "ClientDataModule",
    "ClientSpec",
    "DigitsFederation",
    "FederatedDataModule",
    "TensorPairDataset",
    "collate_batched",
]
