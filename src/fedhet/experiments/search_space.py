"""A search space read from YAML: config override keys mapped to the ranges and choices a tuner may draw.

A suite's ``search_space`` maps dotted override keys of a ``fedhet fit`` config (``model.init_args.lr``,
``trainer.local_epochs``) to one of::

    {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    {type: int, low: 1, high: 5, step: 1, log: false}
    {type: categorical, choices: [sgd, adam]}

``log`` (default ``false``) draws on a log scale (``low`` above 0; for ``int``, only with ``step: 1``); ``step``
(``int`` only, default 1) is the grid spacing from ``low``. A categorical choice may be any YAML value (a list such as
``[64, 64]`` for ``hidden_dims`` too).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

SAMPLERS = ("tpe", "random", "grid", "cmaes")
"""The samplers :func:`tune` draws with: Optuna's TPE, random search, grid search (a finite space), CMA-ES."""

_FIELDS = {"float": {"low", "high", "log"}, "int": {"low", "high", "step", "log"}, "categorical": {"choices"}}
_PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class FloatRange:
    """Real values in ``[low, high]``, on a log scale when ``log``."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class IntRange:
    """Integers ``low, low + step, ...`` up to ``high``, on a log scale when ``log``."""

    low: int
    high: int
    step: int = 1
    log: bool = False


@dataclass(frozen=True)
class Categorical:
    """One of ``choices`` (any YAML values)."""

    choices: tuple[Any, ...]


Distribution = FloatRange | IntRange | Categorical


class _Field:
    """Builds the one-line error of one field of one key of a search space."""

    def __init__(self, where: str, key: str) -> None:
        self.where, self.key = where, key

    def error(self, field: str, problem: str) -> ValueError:
        return ValueError(f"{self.where}: search space key '{self.key}': field '{field}' {problem}")

    def number(self, spec: Mapping[str, Any], field: str, integer: bool) -> Any:
        if field not in spec:
            raise self.error(field, "is missing")
        value = spec[field]
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            raise self.error(field, f"must be a finite {'integer' if integer else 'number'}, got {value!r}")
        return value

    def flag(self, spec: Mapping[str, Any], field: str) -> bool:
        value = spec.get(field, False)
        if not isinstance(value, bool):
            raise self.error(field, f"must be true or false, got {value!r}")
        return value


def _parse_one(where: str, key: Any, spec: Any) -> Distribution:
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ValueError(f"{where}: search space key {key!r} must be a dotted config key such as 'model.init_args.lr'")
    field = _Field(where, key)
    if not isinstance(spec, Mapping):
        raise field.error("type", f"needs a mapping such as {{type: float, low: ..., high: ...}}, got {spec!r}")
    kind = spec.get("type")
    if kind not in _FIELDS:
        raise field.error("type", f"must be one of {sorted(_FIELDS)}, got {kind!r}")
    unknown = sorted(set(spec) - _FIELDS[kind] - {"type"})
    if unknown:
        raise field.error(unknown[0], f"is not a field of a {kind} range (fields: {sorted(_FIELDS[kind])})")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise field.error("choices", f"must be a non-empty list, got {choices!r}")
        return Categorical(tuple(choices))
    integer = kind == "int"
    low, high = field.number(spec, "low", integer), field.number(spec, "high", integer)
    log = field.flag(spec, "log")
    if (high < low) if integer else (high <= low):
        raise field.error("high", f"must be {'at least' if integer else 'above'} low = {low}, got {high}")
    if log and low <= 0:
        raise field.error("low", f"must be above 0 on a log scale, got {low}")
    if not integer:
        return FloatRange(float(low), float(high), log)
    step = field.number(spec, "step", True) if "step" in spec else 1
    if step < 1:
        raise field.error("step", f"must be at least 1, got {step}")
    if log and step != 1:
        raise field.error("step", f"must be 1 on a log scale, got {step}")
    return IntRange(low, high, step, log)


@dataclass(frozen=True)
class SearchSpace:
    """Override keys and the distribution each is drawn from, in the order the YAML gave them.

    Attributes:
        params: ``key -> distribution``.

    """

    params: dict[str, Distribution]

    @classmethod
    def parse(cls, mapping: Mapping[str, Any], where: str) -> SearchSpace:
        """Read a search space from its YAML mapping.

        Args:
            mapping: ``override key -> {type: float | int | categorical, ...}`` (see the module docstring).
            where: what holds it, for error messages (e.g. ``"suite.yaml: methods.fedavg.search_space"``).

        Raises:
            ValueError: one line naming ``where``, the key and the field, for anything malformed.

        Example:
            >>> space = SearchSpace.parse({"model.init_args.lr": {"type": "float", "low": 1e-3, "high": 1.0}}, "x")
            >>> space.params["model.init_args.lr"]
            FloatRange(low=0.001, high=1.0, log=False)

        """
        if not isinstance(mapping, Mapping) or not mapping:
            raise ValueError(f"{where}: a search space must be a non-empty mapping of config keys, got {mapping!r}")
        return cls({key: _parse_one(where, key, spec) for key, spec in mapping.items()})

    def at_edges(self, overrides: Mapping[str, Any], margin: float = 0.1) -> dict[str, str]:
        """The numeric keys of ``overrides`` that lie within ``margin`` of an end of their range.

        A tuned value there suggests that the best value may lie outside the range, which should then be widened.
        The position is measured on the scale the tuner draws on (log when ``log``), as a fraction of the range; a
        range of one value and categorical keys are never at an edge.

        Args:
            overrides: ``key -> value`` as :meth:`suggest` returned them (a tuned study's best trial).
            margin: the fraction of the range counted as its end, at each side.

        Returns:
            ``key -> "low"`` or ``"high"`` for each key at an end.

        Example:
            >>> space = SearchSpace.parse({"lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True}}, "x")
            >>> space.at_edges({"lr": 0.421}), space.at_edges({"lr": 0.1})
            ({'lr': 'high'}, {})

        """
        edges = {}
        for key, value in overrides.items():
            dist = self.params.get(key)
            if not isinstance(dist, FloatRange | IntRange) or dist.high == dist.low:
                continue
            scale = math.log if dist.log else float
            position = (scale(value) - scale(dist.low)) / (scale(dist.high) - scale(dist.low))
            if position <= margin:
                edges[key] = "low"
            elif position >= 1 - margin:
                edges[key] = "high"
        return edges

    def examples(self) -> list[dict[str, Any]]:
        """Override sets that between them hold both ends of every range and every categorical choice.

        Set *i* takes each range's low end for even *i* and its high end for odd *i*, and each categorical's choice
        *i* (cycling): enough sets to check every value's type before a tuner draws it.

        Example:
            >>> lr = {"type": "float", "low": 0.01, "high": 0.5}
            >>> space = SearchSpace.parse({"lr": lr, "opt": {"type": "categorical", "choices": ["a", "b", "c"]}}, "x")
            >>> space.examples()
            [{'lr': 0.01, 'opt': 'a'}, {'lr': 0.5, 'opt': 'b'}, {'lr': 0.01, 'opt': 'c'}]

        """
        count = max([2, *(len(d.choices) for d in self.params.values() if isinstance(d, Categorical))])
        sets = []
        for i in range(count):
            sets.append(
                {
                    key: dist.choices[i % len(dist.choices)]
                    if isinstance(dist, Categorical)
                    else (dist.low if i % 2 == 0 else dist.high)
                    for key, dist in self.params.items()
                }
            )
        return sets

    def grid(self) -> dict[str, list[Any]] | None:
        """Every value of every key, as :meth:`suggest` asks the trial for it, or ``None`` when a key is a float range.

        An integer range gives ``low, low + step, ...`` up to ``high``; a categorical gives its choices (their JSON
        texts for values :meth:`suggest` draws as texts). The input of Optuna's ``GridSampler``.

        Example:
            >>> space = SearchSpace.parse({"e": {"type": "int", "low": 1, "high": 5, "step": 2}}, "x")
            >>> space.grid(), SearchSpace.parse({"lr": {"type": "float", "low": 0.1, "high": 1.0}}, "x").grid()
            ({'e': [1, 3, 5]}, None)

        """
        values: dict[str, list[Any]] = {}
        for key, dist in self.params.items():
            if isinstance(dist, FloatRange):
                return None
            if isinstance(dist, IntRange):
                values[key] = list(range(dist.low, dist.high + 1, dist.step))
            elif all(isinstance(choice, _PRIMITIVE) for choice in dist.choices):
                values[key] = list(dist.choices)
            else:
                values[key] = [json.dumps(choice) for choice in dist.choices]
        return values

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Draw one value per key from ``trial`` (its sampler decides): the trial's config overrides.

        A categorical with values other than ``null``, booleans, numbers and strings is drawn among their JSON texts
        (how the study records them) and returned as the values themselves.
        """
        overrides: dict[str, Any] = {}
        for key, dist in self.params.items():
            if isinstance(dist, FloatRange):
                overrides[key] = trial.suggest_float(key, dist.low, dist.high, log=dist.log)
            elif isinstance(dist, IntRange):
                overrides[key] = trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
            elif all(isinstance(choice, _PRIMITIVE) for choice in dist.choices):
                overrides[key] = trial.suggest_categorical(key, list(dist.choices))
            else:
                texts = [json.dumps(choice) for choice in dist.choices]
                overrides[key] = json.loads(trial.suggest_categorical(key, texts))
        return overrides


def sampler_problem(sampler: str, space: SearchSpace, n_trials: int) -> str | None:
    """Why ``sampler`` cannot search ``space`` with ``n_trials`` trials (``None``: it can).

    A grid needs a finite space (no float range) of at least ``n_trials`` points, so that no point runs twice; CMA-ES
    needs two or more numeric keys (Optuna's CMA-ES draws a one-dimensional space at random, and categorical keys at
    random beside the others) and the ``cmaes`` package.

    Example:
        >>> lr = SearchSpace.parse({"lr": {"type": "float", "low": 0.1, "high": 1.0}}, "x")
        >>> sampler_problem("grid", lr, 4)
        'grid search needs a finite space, and lr is a float range'

    """
    if sampler not in SAMPLERS:
        return f"expected one of {', '.join(SAMPLERS)}, got {sampler!r}"
    if sampler == "grid":
        grid = space.grid()
        if grid is None:
            floats = [key for key, dist in space.params.items() if isinstance(dist, FloatRange)]
            return f"grid search needs a finite space, and {floats[0]} is a float range"
        points = math.prod(len(values) for values in grid.values())
        if points < n_trials:
            return f"the grid holds {points} points, fewer than the {n_trials} trials (a point would run twice)"
    if sampler == "cmaes":
        numeric = [key for key, dist in space.params.items() if isinstance(dist, FloatRange | IntRange)]
        if len(numeric) < 2:
            return f"CMA-ES needs two or more numeric keys (it draws one at random), got {numeric}"
        if importlib.util.find_spec("cmaes") is None:
            return "CMA-ES needs the cmaes package (pip install 'fedhet[cmaes]')"
    return None
