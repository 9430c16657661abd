"""Candidate fixes for the engine's per-client overhead, applied as monkeypatches to measure what they would save.

Nothing here is part of fedhet: each fix is a drop-in replacement for one function or method of ``src/`` (or of
Lightning), patched in for the duration of a ``with applied([...])`` block, so that
``engine_overhead_profile.py --apply ...`` can measure a fix before anyone writes it properly in ``src/``. Every fix
keeps the engine's results bit-identical for the benchmark's FedAvg runs on CPU (same batches, same random
streams, same aggregate); running this file checks that::

    python benchmarks/engine_overhead_fixes.py

Fixes (names for ``--apply``), for the engine as of commit e846351 (which already made seeding cheap, replaced the
``DataLoader`` with an in-memory batch loader, took one ``state_dict`` per client and cached phase masks):
    * ``load``: ``load_state_dict`` of a ``FederatedModule`` copies the tensors straight into its parameters and
      buffers (one ``torch._foreach_copy_`` under ``no_grad``, the name-to-tensor map cached per module) when the keys
      are exactly the module's own, instead of walking every submodule's ``_load_from_state_dict``. A real
      implementation must also fall back when a submodule has load hooks or its own ``_load_from_state_dict`` with
      persistent state (checked once per module).
    * ``metrics``: ``FederatedClassifier`` keeps its validation/test ``MetricCollection`` outside the module tree,
      so ``state_dict``, ``load_state_dict`` and ``parameters()`` walk 5 modules instead of 12 (CPU only as written:
      the metrics are no longer moved by ``module.to(device)``).
    * ``finite``: ``non_finite`` checks all floating tensors with one ``isfinite`` over their concatenation, falling
      back to the per-tensor check only when something is not finite.
    * ``fabric``: ``_FabricOptimizer`` reuses one dynamic ``Fabric<Optimizer>`` class per optimizer class instead of
      creating a new class for every client (a Lightning-side fix; in fedhet, the same by calling
      ``fabric.strategy.optimizer_step`` on the bare optimizer).
    * ``aggregate``: ``WeightedMean`` adds each upload into its float64 running sums in place
      (``sum.add_(value, alpha=weight)``) instead of allocating ``value.double() * weight`` and a new sum.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

FIXES = ("load", "metrics", "finite", "fabric", "aggregate")


# --------------------------------------------------------------------------------------------------------- metrics
def make_metrics_outside_tree(original_configure: Any) -> Any:
    def configure_model(self: Any) -> None:
        if hasattr(self, "head"):
            return
        original_configure(self)
        for name in ("val_metrics", "test_metrics"):
            metrics = self._modules.pop(name)
            self.__dict__[name] = metrics  # a plain attribute: not a submodule any more

    return configure_model


# ------------------------------------------------------------------------------------------------------------ load
def make_fast_load_state_dict(original: Any) -> Any:
    def load_state_dict(self: Any, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        targets = self.__dict__.get("_fast_load_targets")
        if targets is None:
            targets = self.__dict__["_fast_load_targets"] = dict(self.state_dict(keep_vars=True))
        if assign or state_dict.keys() != targets.keys():
            return original(self, state_dict, strict=strict, assign=assign)
        with torch.no_grad():
            torch._foreach_copy_([targets[name] for name in state_dict], list(state_dict.values()))
        return torch.nn.modules.module._IncompatibleKeys([], [])

    return load_state_dict


# ---------------------------------------------------------------------------------------------------------- finite
def make_fast_non_finite(original: Any) -> Any:
    def non_finite(*payloads: Any) -> list[str]:
        floats = [t.reshape(-1) for payload in payloads for t in payload.values() if t.is_floating_point()]
        if not floats or bool(torch.isfinite(torch.cat(floats)).all()):
            return []
        return original(*payloads)

    return non_finite


# ---------------------------------------------------------------------------------------------------------- fabric
_FABRIC_CLASSES: dict[type, type] = {}


def fast_fabric_optimizer_init(self: Any, optimizer: Any, strategy: Any, callbacks: Any = None) -> None:
    """``_FabricOptimizer.__init__`` with the dynamic class made once per optimizer class."""
    from lightning.fabric.wrappers import _FabricOptimizer

    self._optimizer = optimizer
    self._strategy = strategy
    self._callbacks = callbacks or []
    cls = _FABRIC_CLASSES.get(optimizer.__class__)
    if cls is None:
        name = "Fabric" + optimizer.__class__.__name__
        cls = _FABRIC_CLASSES[optimizer.__class__] = type(name, (_FabricOptimizer, optimizer.__class__), {})
    self.__class__ = cls


# ------------------------------------------------------------------------------------------------------- aggregate
def fast_weighted_mean_update(sums: dict[str, Tensor], totals: dict[str, float], state: Any, weight: float) -> None:
    """``_weighted_mean_update`` with in-place float64 accumulation."""
    if weight < 0:
        raise ValueError(f"aggregation weights must be non-negative, got {weight}")
    for name, value in state.items():
        value = value.detach()
        held = sums.get(name)
        if held is not None and held.shape != value.shape:
            raise ValueError(f"parameter '{name}' has shape {tuple(value.shape)} in one client and {tuple(held.shape)}")
        if value.is_floating_point():
            if held is None:
                sums[name] = value.to(torch.float64) * weight
            else:
                held.add_(value, alpha=weight)
            totals[name] = totals.get(name, 0.0) + weight
        else:
            sums[name] = torch.maximum(held, value) if held is not None else value.clone()
            totals.setdefault(name, 0.0)


# ------------------------------------------------------------------------------------------------------- patching
def _targets(fix: str) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for one fix."""
    from lightning.fabric.wrappers import _FabricOptimizer
    from torch import nn

    import fedhet.plugins.aggregators as aggregators
    import fedhet.plugins.trainer as trainer
    from fedhet.modules.base import FederatedModule
    from fedhet.modules.classifier import FederatedClassifier

    if fix == "load":
        return [(FederatedModule, "load_state_dict", make_fast_load_state_dict(nn.Module.load_state_dict))]
    if fix == "metrics":
        return [
            (FederatedClassifier, "configure_model", make_metrics_outside_tree(FederatedClassifier.configure_model))
        ]
    if fix == "finite":
        return [(trainer, "non_finite", make_fast_non_finite(trainer.non_finite))]
    if fix == "fabric":
        return [
            (_FabricOptimizer, "__init__", fast_fabric_optimizer_init),
        ]
    if fix == "aggregate":
        return [(aggregators, "_weighted_mean_update", fast_weighted_mean_update)]
    raise ValueError(f"unknown fix {fix!r}; choose from {FIXES}")


@contextlib.contextmanager
def applied(fixes: list[str]) -> Iterator[None]:
    """Patch the given fixes in (``"all"`` for every one), restoring the originals on exit."""
    names = list(FIXES) if "all" in fixes else fixes
    saved: list[tuple[Any, str, Any, bool]] = []
    try:
        for fix in names:
            for owner, attr, replacement in _targets(fix):
                had = attr in vars(owner)
                saved.append((owner, attr, vars(owner).get(attr), had))
                setattr(owner, attr, replacement)
        yield
    finally:
        for owner, attr, original, had in reversed(saved):
            if had:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)


def _fit_result(fixes: list[str], clients: int = 10, rounds: int = 3) -> tuple[dict[str, Tensor], list[float]]:
    from engine_overhead import make_client_tensors, make_federation, make_model, make_trainer

    federation, _ = make_federation(make_client_tensors(clients, seed=1))
    trainer = make_trainer(rounds)
    with applied(fixes):
        trainer.fit(make_model(), federation)
    return trainer.server_state.shared, [h["train/loss_mean"] for h in trainer.history]


def main() -> None:
    """Check that every fix, alone and all together, leaves a short FedAvg run bit-identical."""
    baseline, losses = _fit_result([])
    for fixes in [[fix] for fix in FIXES] + [["all"]]:
        shared, fixed_losses = _fit_result(fixes)
        same = losses == fixed_losses and all(torch.equal(baseline[k], shared[k]) for k in baseline)
        print(f"{'+'.join(fixes):10s} bit-identical to the engine as it is: {same}")


if __name__ == "__main__":
    main()
