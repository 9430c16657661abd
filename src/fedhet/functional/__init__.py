"""Pure maths of federated learning on heterogeneous clients: torch functions, no Lightning."""

from fedhet.functional.aggregation import weighted_mean
from fedhet.functional.feature_spaces import add_noise_features, prune_features, random_linear_map, resample_images
from fedhet.functional.partition import (
    HybridPartition,
    dirichlet_label_skew,
    dominant_class_sets,
    dominant_class_skew,
    grid_blocks,
    hybrid_partition,
    permute_labels_by_group,
    quantity_skew,
    shard_label_skew,
    split_indices,
)

__all__ = [
    "HybridPartition",
    "add_noise_features",
    "dirichlet_label_skew",
    "dominant_class_sets",
    "dominant_class_skew",
    "grid_blocks",
    "hybrid_partition",
    "permute_labels_by_group",
    "prune_features",
    "quantity_skew",
    "random_linear_map",
    "resample_images",
    "shard_label_skew",
    "split_indices",
    "weighted_mean",
]
