"""Text for the ``fedhet`` command line: its commands, a parse error cut to its one sentence, a docstring as plain text.

jsonargparse reports a bad value inside a ``class_path``/``init_args`` section as a tree of every type it tried
(``Does not validate against any of the Union subtypes``, ``Subtypes: [...]``, ``Given value: ...``), the one
sentence that matters at its deepest leaf; :func:`error_sentence` finds that leaf and the option it belongs to.
Docstrings are written for Sphinx; :func:`plain_text` renders them as ``--help`` shows them.
"""

from __future__ import annotations

import re

__all__ = ["COMMANDS", "DESCRIPTION", "error_sentence", "plain_text"]

DESCRIPTION = "fedhet: personalised federated learning across heterogeneous clients, on Lightning and Fabric."
"""What ``fedhet --help`` (and each command's parser) says the tool is."""

COMMANDS = {
    "fit": "train a federation from a config: fedhet fit -c configs/<method>/<dataset>.yaml",
    "validate": "evaluate every client's personalised model on its validation split",
    "test": "evaluate every client's personalised model on its test split",
    "export": "export trained clients as Lightning checkpoints (clients/ of the run's version folder)",
    "compare": "tune and run a suite (methods x federations x seeds), write its table: fedhet compare -c suite.yaml",
}
"""The ``fedhet`` commands and what each does, as ``fedhet --help`` lists them (without importing Lightning)."""

# ---------------------------------------------------------------------------------------------------- errors
_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Given value type:",
    "Given value:",
    "Errors:",
    "Expected a <class 'NoneType'>",  # the ``None`` of an ``Optional``: never what the user meant
    "Expected a path but",  # ``--model NAME`` is tried as a config file first
)
_KEY = re.compile(r'Parser key "(?P<key>[^"]+)":\s*(?P<rest>.*)')
_CLASS_PATH = re.compile(r"Problem with given class_path '(?P<path>[^']+)':")
_EXPECTED = re.compile(r"Expected an? (?P<type>.+?)\. Got value: (?P<value>.*)")
_NOT_ACCEPTED = re.compile(r"Option '(?P<option>[^']+)' is not accepted")
_NO_ATTRIBUTE = re.compile(r"module '(?P<module>[^']+)' has no attribute '(?P<name>[^']+)'")
_CLASS_TYPE = re.compile(r"<class '(?:[\w.]+\.)?(?P<name>\w+)'>")
_LITERAL = re.compile(r"(?:typing\.)?Literal\[(?P<choices>.*)\]")


def _type_name(type_text: str) -> str:
    """``<class 'float'>`` as ``a float``, ``typing.Literal['a', 'b']`` as ``one of 'a', 'b'``."""
    literal = _LITERAL.fullmatch(type_text)
    if literal:
        return f"one of {literal['choices']}"
    name = _CLASS_TYPE.sub(lambda match: match["name"], type_text)
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _sentence(leaf: str, key: list[str], class_path: str | None) -> tuple[list[str], str]:
    """The option and sentence of the innermost error ``leaf``.

    Args:
        leaf: the innermost error's text.
        key: the option the error was found under, e.g. ``["model"]``.
        class_path: the class named by ``key``'s ``class_path`` when the leaf sits right under it, else ``None``.

    """
    expected = _EXPECTED.fullmatch(leaf)
    if expected:
        return key, f"expected {_type_name(expected['type'])}, got {expected['value']!r}"
    not_accepted = _NOT_ACCEPTED.fullmatch(leaf)
    if not_accepted and class_path is not None:
        return [*key, "init_args", not_accepted["option"]], f"{class_path} has no such option"
    if not_accepted:
        return [*key, not_accepted["option"]], "no such option"
    if class_path is None:
        return key, leaf
    no_attribute = _NO_ATTRIBUTE.fullmatch(leaf)
    if no_attribute:
        leaf = f"{no_attribute['module']} has no class {no_attribute['name']!r}"
    return [*key, "class_path"], leaf  # a class_path refused for itself (unknown, not a subclass...)


def error_sentence(message: str) -> str:
    r"""The one sentence of a jsonargparse error message that says what is wrong, led by the option it concerns.

    Args:
        message: the message jsonargparse gives ``ArgumentParser.error``, possibly many lines long.

    Returns:
        one line, e.g. ``model.init_args.lr: expected a float, got 'abc'``; a one-line message unchanged.

    Example:
        >>> error_sentence('Parser key "trainer.rounds":\n  Expected a <class \'int\'>. Got value: abc')
        "trainer.rounds: expected an int, got 'abc'"

    """
    key: list[tuple[int, str, str | None]] = []  # (indent, key part, class_path) of the lines above the leaf
    leaf: list[str] = []
    for raw in message.splitlines():
        text = raw.strip()
        item = text.startswith("- ")
        text = text[2:] if item else text
        indent = len(raw) - len(raw.lstrip()) + (2 if item else 0)
        if not text or text.startswith(_NOISE):
            continue
        named = _KEY.fullmatch(text)
        problem = _CLASS_PATH.fullmatch(text)
        if leaf:  # the leaf goes on over its continuation lines, up to the next alternative or option
            if item or named or problem:
                break
            leaf.append(text)
            continue
        key = [entry for entry in key if entry[0] < indent]
        if named:
            key.append((indent, named["key"], None))
            if named["rest"]:
                leaf.append(named["rest"])
        elif problem:
            key.append((indent, "init_args", problem["path"]))
        else:
            leaf.append(text)
    if not leaf:
        return " ".join(message.split())
    class_path = key.pop()[2] if key and key[-1][2] is not None else None
    parts, sentence = _sentence(" ".join(leaf), [part for _, part, _ in key], class_path)
    return f"{'.'.join(parts)}: {sentence}" if parts else sentence


# ---------------------------------------------------------------------------------------------------- help
_ROLE = re.compile(r":(?:[\w-]+:)+`~?(?P<body>[^`]+)`")  # :class:`~a.B`, :py:meth:`x`, :math:`y`
_TITLED = re.compile(r"(?P<title>.+?)\s*<[^<>]+>")  # :ref:`the docs <target>`
_LITERAL_TEXT = re.compile(r"``(?P<body>.+?)``", re.DOTALL)
_DEFAULT_ROLE = re.compile(r"(?<![\w`])`(?P<body>[^`\s][^`]*)`(?![\w`])")
_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. (?P<name>[\w-]+)::\s*(?P<argument>.*)$", re.MULTILINE)
_NAMED_DIRECTIVES = {"note": "Note:", "warning": "Warning:", "seealso": "See also:", "tip": "Tip:"}


def _role(match: re.Match[str]) -> str:
    """A role's text: ``:class:`~a.B``` as ``B``, ``:class:`a.B``` as ``a.B``, ``:ref:`docs <x>``` as ``docs``."""
    titled = _TITLED.fullmatch(match["body"])
    if titled:
        return titled["title"]
    return match["body"].rsplit(".", 1)[-1] if "`~" in match.group(0) else match["body"]


def _directive(match: re.Match[str]) -> str:
    label = _NAMED_DIRECTIVES.get(match["name"])
    if label is None:  # code-block, math, ...: the block under it stays, the directive line goes
        return ""
    return f"{match['indent']}{label} {match['argument']}".rstrip()


def plain_text(text: str) -> str:
    """A reST docstring (or a piece of one) as plain text: roles, literals and directives without their markup.

    Args:
        text: e.g. ``"the :class:`~fedhet.plugins.FederatedTrainer`'s ``rounds``"``.

    Returns:
        e.g. ``"the FederatedTrainer's rounds"``; ``:math:`x^2``` becomes ``x^2`` and a paragraph ending in ``::``
        ends in ``:``.

    Example:
        >>> plain_text("Each :class:`~fedhet.datamodules.ClientDataModule`, ``rounds`` times::")
        'Each ClientDataModule, rounds times:'

    """
    text = _DIRECTIVE.sub(_directive, text)
    text = _ROLE.sub(_role, text)
    text = _LITERAL_TEXT.sub(lambda match: match["body"], text)
    text = _DEFAULT_ROLE.sub(lambda match: match["body"], text)
    return re.sub(r"(?<=\S)::(?=\s|$)", ":", text)
