"""Pure maths of federated learning on heterogeneous clients: torch functions, no Lightning."""

from fedhet.functional.aggregation import weighted_mean
from fedhet.functional.centroids import (
    aggregate_centroids,
    class_centroids,
    class_feature_sums,
    feature_alignment_loss,
    head_statistics,
)
from fedhet.functional.feature_spaces import add_noise_features, prune_features, random_linear_map, resample_images
from fedhet.functional.head_mixing import (
    collaboration_matrix,
    combination_weights,
    mix_heads,
    project_simplex,
    repair_psd,
    solve_simplex_qp,
)
from fedhet.functional.matching import (
    Classifier,
    match_neurons,
    matched_average,
    matching_cost,
    matching_objective,
    model_matching,
    project_classifier,
)
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
from fedhet.functional.proximal import proximal_penalty
from fedhet.functional.tabular_metrics import balanced_accuracy, binary_auprc, binary_auroc, one_vs_rest

__all__ = [
    "Classifier",
    "HybridPartition",
    "add_noise_features",
    "aggregate_centroids",
    "balanced_accuracy",
    "binary_auprc",
    "binary_auroc",
    "class_centroids",
    "class_feature_sums",
    "collaboration_matrix",
    "combination_weights",
    "dirichlet_label_skew",
    "dominant_class_sets",
    "dominant_class_skew",
    "feature_alignment_loss",
    "grid_blocks",
    "head_statistics",
    "hybrid_partition",
    "match_neurons",
    "matched_average",
    "matching_cost",
    "matching_objective",
    "mix_heads",
    "model_matching",
    "one_vs_rest",
    "permute_labels_by_group",
    "project_classifier",
    "project_simplex",
    "proximal_penalty",
    "prune_features",
    "quantity_skew",
    "random_linear_map",
    "repair_psd",
    "resample_images",
    "shard_label_skew",
    "solve_simplex_qp",
    "split_indices",
    "weighted_mean",
]
