"""``fedhet.cli_text``: jsonargparse's error trees cut to one sentence, reST docstrings as plain text."""

import pytest

from fedhet.cli_text import error_sentence, plain_text

UNION = """Parser key "model":
  Does not validate against any of the Union subtypes
  Subtypes: [<class 'fedhet.modules.base.FederatedModule'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path 'fedhet.modules.FedAvg':
        {inner}
    - Expected a <class 'NoneType'>
  Given value type: <class 'jsonargparse._util.NestedArg'>
  Given value: NestedArg(key='lr', val='abc')"""


@pytest.mark.parametrize(
    ("message", "sentence"),
    [
        ("unrecognized arguments: --trainer.roundz 3", "unrecognized arguments: --trainer.roundz 3"),
        (
            "Parser key \"trainer.rounds\":\n  Expected a <class 'int'>. Got value: abc",
            "trainer.rounds: expected an int, got 'abc'",
        ),
        (
            "Parser key \"trainer.personal_init\":\n  Expected a typing.Literal['shared', 'per_client']. Got value: x",
            "trainer.personal_init: expected one of 'shared', 'per_client', got 'x'",
        ),
        (
            UNION.format(inner="Parser key \"lr\":\n          Expected a <class 'float'>. Got value: abc"),
            "model.init_args.lr: expected a float, got 'abc'",
        ),
        (
            UNION.format(inner="Option 'no_such_knob' is not accepted"),
            "model.init_args.no_such_knob: fedhet.modules.FedAvg has no such option",
        ),
        (
            UNION.format(inner="module 'fedhet.modules' has no attribute 'FedAvgg'"),
            "model.class_path: fedhet.modules has no class 'FedAvgg'",
        ),
        (
            "Parser key \"model\":\n\n  - Expected a path but X either not accessible or invalid\n  - "
            + UNION.split("\n", 1)[1].format(inner="module 'fedhet.modules' has no attribute 'X'").lstrip(),
            "model.class_path: fedhet.modules has no class 'X'",
        ),
        (
            "Does not validate against any of the Union subtypes\nErrors:\n  - UniformSampler: field 'fraction' must be"
            " in (0, 1], got 0.0\n  - Expected a <class 'NoneType'>\nGiven value: Namespace(...)",
            "UniformSampler: field 'fraction' must be in (0, 1], got 0.0",
        ),
        (
            'Problems parsing config: while parsing a flow node\ndid not find expected node content\n  in "<unicode '
            'string>", line 2, column 1',
            'Problems parsing config: while parsing a flow node did not find expected node content in "<unicode '
            'string>", line 2, column 1',
        ),
    ],
    ids=["one-line", "wrong-type", "literal", "nested-type", "unknown-init-arg", "unknown-class", "class-by-name",
         "refused-value", "yaml-syntax"],
)  # fmt: skip
def test_error_sentence(message, sentence):
    assert error_sentence(message) == sentence


@pytest.mark.parametrize(
    ("rest", "text"),
    [
        (":class:`~fedhet.plugins.FederatedTrainer`", "FederatedTrainer"),
        (":class:`fedhet.plugins.FederatedTrainer`", "fedhet.plugins.FederatedTrainer"),
        (":py:meth:`~a.B.setup`, :func:`f`, :mod:`fedhet.x`", "setup, f, fedhet.x"),
        (":math:`\\sum_i w_i x_i`", "\\sum_i w_i x_i"),
        (":ref:`the CLI docs <lightning-cli>`", "the CLI docs"),
        ('``rounds`` (``"last"``)', 'rounds ("last")'),
        ("the `default` role", "the default role"),
        ("An example::\n\n    a: 1", "An example:\n\n    a: 1"),
        ("Config:\n\n.. code-block:: yaml\n\n    a: 1", "Config:\n\n\n    a: 1"),
        (".. note:: it saves", "Note: it saves"),
        ("no markup: a * b, 'x'", "no markup: a * b, 'x'"),
    ],
)
def test_plain_text(rest, text):
    assert plain_text(rest) == text
