"""A suite file is read like a config: plain names only, and a file that cannot be read is one line, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fedhet.cli import main
from fedhet.experiments.bounded_yaml import MAX_DEPTH, YAMLInputError, read_bounded_yaml

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "smoke.yaml"


def _smoke(tmp_path: Path) -> dict[str, Any]:
    suite: dict[str, Any] = yaml.safe_load(SMOKE.read_text())
    for method in suite["methods"].values():
        method["config"] = str((SMOKE.parent / method["config"]).resolve())
    suite["output"] = str(tmp_path / "work" / "out")
    return suite


def _exit_2(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "-c", str(path), "--methods", "fedavg", "--seeds", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("section", ["methods", "federations"])
@pytest.mark.parametrize("name", ["../../ESCAPED", "a/b", ".", "x..y", ""])
def test_a_method_or_federation_name_that_is_not_plain_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, name: str
) -> None:
    suite = _smoke(tmp_path)
    if section == "methods":
        suite["methods"] = {name: suite["methods"]["fedavg"], "fedavg": suite["methods"]["fedavg"]}
    else:
        suite["federations"] = {name: None}
    path = tmp_path / "work" / "suite.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(suite))
    err = _exit_2(path, capsys)
    assert err.startswith(f"fedhet compare: error: suite file '{path}': {section}: {name!r} is not a plain name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["suite.yaml", "work"]  # nothing written, inside or out


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("name: sm\u00f6ke\n".encode("latin-1"), "not UTF-8 text (byte 8, line 1)"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text (byte 0, line 1)"),
        (b"\x00\x01\x02\x03", "not YAML"),
        (("a: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(), f"nested more than {MAX_DEPTH} levels deep"),
        (b"name: [unclosed\n", "not YAML"),
    ],
    ids=["latin-1", "binary", "control-bytes", "deep", "malformed"],
)
def test_an_unreadable_suite_file_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, problem: str
) -> None:
    path = tmp_path / "suite.yaml"
    path.write_bytes(content)
    err = _exit_2(path, capsys)
    assert err.startswith(f"fedhet compare: error: suite file '{path}': {problem}")


def _bomb(levels: int, indent: str = "") -> str:
    """YAML mapping lines whose last anchor expands to ``10 ** levels`` strings: a "billion laughs"."""
    lines = [f"{indent}a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for k in range(1, levels):
        lines.append(f"{indent}a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]")
    return "\n".join(lines)


@pytest.mark.timeout(60)
def test_an_alias_bomb_in_overrides_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _smoke(tmp_path)
    methods = suite.pop("methods")
    path = tmp_path / "suite.yaml"
    path.write_text(
        yaml.safe_dump(suite)
        + f"methods:\n  fedavg:\n    config: {methods['fedavg']['config']}\n    overrides:\n"
        + _bomb(9, indent="      ")
        + "\n"
    )
    assert yaml.safe_load(path.read_text())  # PyYAML builds it at once (shared lists); walking it never ends
    err = _exit_2(path, capsys)
    assert err == f"fedhet compare: error: suite file '{path}': its aliases expand to more than 100,000 values"


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &loop [1, *loop]\n")
    with pytest.raises(YAMLInputError, match=r"loop\.yaml: an alias on line 1 refers to a collection holding it"):
        read_bounded_yaml(path)


def test_aliases_within_the_bound_and_nesting_to_the_bound_load(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(_bomb(4) + "\n" + "deep: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    value = read_bounded_yaml(path)
    assert value["a3"][9][9][9][9] == "lol"
    assert value == yaml.safe_load(path.read_text())
