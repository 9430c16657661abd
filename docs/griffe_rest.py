"""Griffe extension: renders the reST markup of fedhet's Google-style docstrings as Markdown for the API site.

fedhet's docstrings use a few reST constructs that mkdocstrings-python does not read: roles (``:class:`~a.B```,
``:func:``, ``:math:``...), ``.. math::`` and ``.. code-block::`` directives and ``::`` literal blocks. Before the
docstrings are parsed, this extension rewrites them: a role becomes inline code (``~`` keeps the last name), inline
maths becomes ``$...$`` and a maths block ``$$...$$`` (both rendered by ``pymdownx.arithmatex``), a code block a
fenced block, and an ``Example:`` section the ``Examples:`` section whose doctests griffe renders as code. Loaded by
``mkdocs.yml`` (``extensions: [docs/griffe_rest.py]``).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|obj|exc|const|ref|doc):`([^`]+)`")
MATH_ROLE = re.compile(r":math:`([^`]+)`")
DIRECTIVE = re.compile(r"^(\s*)\.\. (math|code-block)::[ \t]*(.*?)\s*$")
LITERAL = re.compile(r"^(\s*)(.*\S)::\s*$")
EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    target = match.group(2).lstrip("!")
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        target = target[: target.index("<")].strip()
    elif target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _blocks(text: str) -> str:
    """``.. math::`` / ``.. code-block::`` / ``::`` blocks as Markdown blocks at the same indentation."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = DIRECTIVE.match(line)
        literal = None if directive else LITERAL.match(line)
        if not (directive or literal):
            out.append(line)
            i += 1
            continue
        indent = (directive or literal).group(1)  # type: ignore[union-attr]
        j = i + 1
        body: list[str] = []
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > len(indent)):
            body.append(lines[j])
            j += 1
        while body and not body[-1].strip():
            body.pop()
        code = textwrap.dedent("\n".join(body)).strip("\n").splitlines()
        if directive and directive.group(2) == "math" and directive.group(3):  # .. math:: on one line
            code.insert(0, directive.group(3))
        if directive and directive.group(2) == "math":
            fence_open, fence_close = "$$", "$$"
        else:
            fence_open, fence_close = "```" + (directive.group(3) if directive else "text"), "```"
        if literal:
            out.append(f"{indent}{literal.group(2)}:")
        out += ["", indent + fence_open, *(indent + c if c else "" for c in code), indent + fence_close, ""]
        i = j
    return "\n".join(out)


def rest_to_markdown(text: str) -> str:
    """The docstring ``text`` with its reST roles and directives written as Markdown."""
    text = EXAMPLE.sub(r"\1Examples:", _blocks(text))  # griffe reads doctests in an "Examples" section
    text = MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return ROLE.sub(_role, text)


class RestToMarkdown(griffe.Extension):
    """Rewrites every docstring once it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: D102
        if obj.docstring is not None:
            obj.docstring.value = rest_to_markdown(obj.docstring.value)
