"""CallbackHooks: Fabric.call's contract (keyword filtering by signature), resolved once per hook."""

from __future__ import annotations

from typing import Any

from lightning.fabric import Fabric

from fedhet.plugins.hooks.dispatch import CallbackHooks


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def on_round_start(self, round_idx: int) -> None:
        self.calls.append(("on_round_start", {"round_idx": round_idx}))

    def on_round_end(self, trainer: Any, **rest: Any) -> None:
        self.calls.append(("on_round_end", {"trainer": trainer, **rest}))

    on_aggregate_start = "not callable"


def test_each_callback_gets_the_keywords_its_signature_names():
    first, second = Recorder(), Recorder()
    hooks = CallbackHooks([first, object(), second])
    hooks("on_round_start", trainer="t", round_idx=3)
    hooks("on_round_end", trainer="t", round_idx=3, metrics={"a": 1.0})
    hooks("on_aggregate_start", trainer="t")  # not callable: skipped
    hooks("on_federation_end", trainer="t")  # nobody defines it
    expected = [
        ("on_round_start", {"round_idx": 3}),
        ("on_round_end", {"trainer": "t", "round_idx": 3, "metrics": {"a": 1.0}}),
    ]
    assert first.calls == expected
    assert second.calls == expected


def test_matches_fabric_call_on_the_same_callbacks():
    ours, theirs = Recorder(), Recorder()
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[theirs])
    hooks = CallbackHooks([ours])
    for round_idx in range(3):  # repeated calls use the resolved targets
        for name in ("on_round_start", "on_round_end"):
            kwargs = {"trainer": None, "round_idx": round_idx, "metrics": {"loss": float(round_idx)}}
            hooks(name, **kwargs)
            fabric.call(name, **kwargs)
    assert ours.calls == theirs.calls
    assert len(ours.calls) == 6
