"""Read a YAML file that comes from a user, bounded: UTF-8 text, limited nesting, aliases that expand within a bound.

A YAML alias (``*name``) repeats an anchored node without copying it, so a few lines of nested aliases (a "billion
laughs" file) describe a value whose walk never ends; nesting thousands of levels deep makes PyYAML's composer run out
of stack. :func:`read_bounded_yaml` refuses both before any value is built, with one line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64
"""How deep collections may nest, counted through aliases."""

MAX_NODES = 100_000
"""How many values (scalars, lists, mappings, keys included) a file may hold once every alias is expanded."""


class YAMLInputError(ValueError):
    """A file that is not UTF-8, not YAML, nested too deep or whose aliases expand beyond :data:`MAX_NODES`.

    Args:
        path: the file.
        problem: what is wrong with it, in one line.

    """

    def __init__(self, path: Path | None, problem: str) -> None:
        super().__init__(problem if path is None else f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _DepthLimitedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints
    """PyYAML's safe loader, refusing collections nested deeper than :data:`MAX_DEPTH` while it composes them."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YAMLInputError(None, f"nested more than {MAX_DEPTH} levels deep (line {mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand beyond :data:`MAX_NODES` values or :data:`MAX_DEPTH` levels.

    Each distinct node is visited once (a post-order walk without recursion), so the check costs the size of the file,
    not of its expansion.

    Args:
        root: a composed document.

    Raises:
        YAMLInputError: naming the bound exceeded, or an alias that refers to a collection holding it.

    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    ancestors: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            kids = _children(node)
            size[key] = 1 + sum(size[id(kid)] for kid in kids)
            depth[key] = 1 + max((depth[id(kid)] for kid in kids), default=0)
            ancestors.discard(key)
            if size[key] > MAX_NODES:
                raise YAMLInputError(None, f"its aliases expand to more than {MAX_NODES:,} values")
            if depth[key] > MAX_DEPTH:
                raise YAMLInputError(None, f"its aliases nest more than {MAX_DEPTH} levels deep")
            continue
        if key in size:
            continue
        ancestors.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in ancestors:
                line = kid.start_mark.line + 1
                raise YAMLInputError(None, f"an alias on line {line} refers to a collection holding it")
            if id(kid) not in size:
                stack.append((kid, False))


def read_bounded_yaml(path: Path) -> Any:
    r"""The value of the YAML file ``path``, read within the bounds above.

    Args:
        path: the file (UTF-8).

    Returns:
        the value of its one document (``None`` when empty).

    Raises:
        YAMLInputError: in one line naming the file: unreadable, not UTF-8 (with the line of the first bad byte),
            not YAML, nested too deep, or aliases that expand too far.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     bomb = Path(folder, "bomb.yaml")
        ...     _ = bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        ...         f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        ...         for p, c in zip("abcdef", "bcdefg")))
        ...     try:
        ...         read_bounded_yaml(bomb)
        ...     except YAMLInputError as err:
        ...         print(str(err).replace(folder, "<folder>"))
        <folder>/bomb.yaml: its aliases expand to more than 100,000 values

    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise YAMLInputError(path, f"cannot be read ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise YAMLInputError(path, f"not UTF-8 text (byte {err.start}, line {line})") from None
    loader = None
    try:
        loader = _DepthLimitedLoader(text)
        root = loader.get_single_node()
        if root is None:
            return None
        check_expansion(root)
        return loader.construct_document(root)
    except YAMLInputError as err:
        raise YAMLInputError(path, err.problem) from None
    except yaml.YAMLError as err:
        raise YAMLInputError(path, f"not YAML: {' '.join(str(err).split())}") from None
    finally:
        if loader is not None:
            loader.dispose()
