"""Pure maths of federated learning on heterogeneous clients: torch functions, no Lightning."""

from fedhet.functional.aggregation import weighted_mean
from fedhet.functional.centroids import (
    aggregate_centroids,
    class_centroids,
    class_feature_sums,
    feature_alignment_loss,
    head_statistics,
)
from fedhet.functional.dictionary import (
    class_balanced_indices,
    dictionary_loss,
    ensemble_probabilities,
    fit_softmax_regression,
    init_dictionary,
)
from fedhet.functional.feature_spaces import add_noise_features, prune_features, random_linear_map, resample_images
from fedhet.functional.gaussian import (
    bures_sq,
    class_moments,
    gaussian_barycenter,
    gaussian_w2_sq,
    psd_sqrt,
    regression_anchor_means,
)
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
from fedhet.functional.privacy import (
    add_gaussian_noise,
    clip_by_global_norm,
    gaussian_noise_std,
    global_l2_norm,
    noise_multiplier_for,
)
from fedhet.functional.proximal import proximal_penalty
from fedhet.functional.representation_kernels import kernel_penalty, random_alignment_inputs
from fedhet.functional.spd import tangent_vectors, trial_covariances
from fedhet.functional.stacking import stack_padded, stack_states, unstack_states
from fedhet.functional.tabular_metrics import balanced_accuracy, binary_auprc, binary_auroc, one_vs_rest
from fedhet.functional.wasserstein import (
    ground_cost,
    squared_distances,
    transport_plan,
    wasserstein_barycenter,
    wasserstein_cost,
)

__all__ = [
    "Classifier",
    "HybridPartition",
    "add_gaussian_noise",
    "add_noise_features",
    "aggregate_centroids",
    "balanced_accuracy",
    "binary_auprc",
    "binary_auroc",
    "bures_sq",
    "class_balanced_indices",
    "class_centroids",
    "class_feature_sums",
    "class_moments",
    "clip_by_global_norm",
    "collaboration_matrix",
    "combination_weights",
    "dictionary_loss",
    "dirichlet_label_skew",
    "dominant_class_sets",
    "dominant_class_skew",
    "ensemble_probabilities",
    "feature_alignment_loss",
    "fit_softmax_regression",
    "gaussian_barycenter",
    "gaussian_noise_std",
    "gaussian_w2_sq",
    "global_l2_norm",
    "grid_blocks",
    "ground_cost",
    "head_statistics",
    "hybrid_partition",
    "init_dictionary",
    "kernel_penalty",
    "match_neurons",
    "matched_average",
    "matching_cost",
    "matching_objective",
    "mix_heads",
    "model_matching",
    "noise_multiplier_for",
    "one_vs_rest",
    "permute_labels_by_group",
    "project_classifier",
    "project_simplex",
    "proximal_penalty",
    "prune_features",
    "psd_sqrt",
    "quantity_skew",
    "random_alignment_inputs",
    "random_linear_map",
    "regression_anchor_means",
    "repair_psd",
    "resample_images",
    "shard_label_skew",
    "solve_simplex_qp",
    "split_indices",
    "squared_distances",
    "stack_padded",
    "stack_states",
    "tangent_vectors",
    "transport_plan",
    "trial_covariances",
    "unstack_states",
    "wasserstein_barycenter",
    "wasserstein_cost",
    "weighted_mean",
]
