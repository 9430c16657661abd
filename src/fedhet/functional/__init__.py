"""Pure maths of federated learning on heterogeneous clients: torch functions, no Lightning."""

from fedhet.functional.aggregation import weighted_mean
from fedhet.functional.partition import dirichlet_label_skew, split_indices

__all__ = ["dirichlet_label_skew", "split_indices", "weighted_mean"]
