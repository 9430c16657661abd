"""Lazy exports: a package's public names are imported from their submodules when first read.

A package whose ``__init__`` imported every submodule made ``import fedhet.functional.aggregation`` load POT, and
``fedhet --help`` load Lightning. Such a package now writes its exports once, as imports under
``if TYPE_CHECKING:`` (what type checkers and readers see), and hands :func:`lazy_exports` its own file: the
``__getattr__`` it returns reads those import statements and imports a name's submodule on first use, so each name
keeps its one public import path (``from fedhet.functional import weighted_mean``) and costs nothing until read.
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports"]


def _type_checking_imports(init_file: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, attribute)`` of the ``from module import attribute [as name]`` under ``if TYPE_CHECKING:``."""
    where: dict[str, tuple[str, str]] = {}
    for node in ast.parse(Path(init_file).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module is not None:
                    for alias in statement.names:
                        where[alias.asname or alias.name] = (statement.module, alias.name)
    return where


def lazy_exports(package: str, init_file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a package whose exports are imported under ``TYPE_CHECKING``.

    Args:
        package: the package's ``__name__``.
        init_file: its ``__init__``'s ``__file__``, read (once, on the first lookup) for its ``TYPE_CHECKING`` imports.

    Returns:
        ``(__getattr__, __dir__)``: the first imports the name's module and keeps the value in the package (later reads
        do not come back here); an unknown name raises ``AttributeError`` as a module's attribute lookup does.

    Example:
        ``__getattr__, __dir__ = lazy_exports(__name__, __file__)`` at the end of the package's ``__init__``.

    """
    exports = functools.cache(lambda: _type_checking_imports(init_file))

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name)
        found = exports().get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(found[0]), found[1])
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*vars(sys.modules[package]), *exports()})

    return __getattr__, __dir__
