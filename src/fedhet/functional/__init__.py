"""Pure maths of federated learning on heterogeneous clients: torch functions, no Lightning."""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.functional.aggregation import (
        coordinate_median,
        trim_count,
        trimmed_mean,
        weighted_mean,
        weighted_mean_compute,
        weighted_mean_update,
    )
    from fedhet.functional.anchors import (
        anchor_sample_ce,
        draws_by_class,
        evaluated_classes,
        gaussian_samples,
        group_draws,
        present_classes,
        present_w2_sq,
    )
    from fedhet.functional.centroids import (
        aggregate_centroids,
        class_centroids,
        class_feature_sums,
        feature_alignment_losses,
        head_statistics,
    )
    from fedhet.functional.dictionary import (
        atom_batches,
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
        stratified_split_indices,
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
    from fedhet.functional.stacking import masked_mean, stack_padded, stack_states, unstack_states
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
    "anchor_sample_ce",
    "atom_batches",
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
    "coordinate_median",
    "dictionary_loss",
    "dirichlet_label_skew",
    "dominant_class_sets",
    "dominant_class_skew",
    "draws_by_class",
    "ensemble_probabilities",
    "evaluated_classes",
    "feature_alignment_losses",
    "fit_softmax_regression",
    "gaussian_barycenter",
    "gaussian_noise_std",
    "gaussian_samples",
    "gaussian_w2_sq",
    "global_l2_norm",
    "grid_blocks",
    "group_draws",
    "ground_cost",
    "head_statistics",
    "hybrid_partition",
    "init_dictionary",
    "kernel_penalty",
    "masked_mean",
    "match_neurons",
    "matched_average",
    "matching_cost",
    "matching_objective",
    "mix_heads",
    "model_matching",
    "noise_multiplier_for",
    "one_vs_rest",
    "permute_labels_by_group",
    "present_classes",
    "present_w2_sq",
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
    "stratified_split_indices",
    "squared_distances",
    "stack_padded",
    "stack_states",
    "tangent_vectors",
    "transport_plan",
    "trial_covariances",
    "trim_count",
    "trimmed_mean",
    "unstack_states",
    "wasserstein_barycenter",
    "wasserstein_cost",
    "weighted_mean",
    "weighted_mean_compute",
    "weighted_mean_update",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
