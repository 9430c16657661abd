"""Experiments from configs: suites of methods, federations and seeds, and hyperparameter tuning on validation.

Submodules are imported where used (:mod:`~fedhet.experiments.tuning` imports Optuna), so importing this package is
cheap.
"""
