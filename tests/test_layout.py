"""The docs' maps of the tree name files that exist, and the engine's component table names every engine file."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "src" / "fedhet" / "plugins"
DESCRIPTION_COLUMN = 16  # where an entry's description starts in layout.md's tree


def layout_entries() -> dict[Path, str]:
    """Each entry of layout.md's tree (a folder or file, placed by its indentation) with its description."""
    block = (ROOT / "docs" / "layout.md").read_text().split("```\n", 2)[1]
    entries: dict[Path, str] = {}
    parents: list[tuple[int, Path]] = []
    current: Path | None = None
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent < DESCRIPTION_COLUMN:  # an entry: its name, then its description
            name, _, description = line.strip().partition(" ")
            parents = [(i, p) for i, p in parents if i < indent]
            current = (parents[-1][1] if parents else ROOT) / name
            entries[current] = description
            if name.endswith("/"):
                parents.append((indent, current))
        else:  # the description goes on
            assert current is not None, line
            entries[current] += " " + line.strip()
    return entries


def test_every_folder_and_file_the_layout_names_exists():
    entries = layout_entries()
    assert ROOT / "src/fedhet/plugins/rounds" in entries
    for path, description in entries.items():
        assert path.exists(), f"docs/layout.md names {path.relative_to(ROOT)}, which does not exist"
        if path.is_dir():
            for name in re.findall(r"\b(\w+\.py)\b", description):
                assert (path / name).is_file(), f"docs/layout.md names {name} in {path.relative_to(ROOT)}/"


def test_the_layout_names_every_folder_of_the_engine():
    entries = layout_entries()
    folders = {p for p in ENGINE.iterdir() if (p / "__init__.py").is_file()}
    assert len(folders) >= 5
    assert folders <= set(entries), sorted(str(p.relative_to(ROOT)) for p in folders - set(entries))


def test_the_component_table_names_every_engine_file_and_only_those():
    guide = (ROOT / "docs" / "writing-a-method.md").read_text()
    table = guide.split("| component | file (in `src/fedhet/plugins/`) |", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+/\w+\.py)`", table))
    files = {str(p.relative_to(ENGINE)) for p in ENGINE.glob("*/*.py") if p.name != "__init__.py"}
    assert named - files == set(), f"the component table names files that do not exist: {sorted(named - files)}"
    assert files - named == set(), f"the component table leaves out: {sorted(files - named)}"


def test_the_api_reference_renders_every_public_module_of_experiments():
    page = (ROOT / "docs" / "api" / "experiments.md").read_text()
    rendered = set(re.findall(r"^::: fedhet\.experiments\.(\w+)$", page, flags=re.MULTILINE))
    modules = {p.stem for p in (ROOT / "src" / "fedhet" / "experiments").glob("*.py") if not p.name.startswith("_")}
    assert modules - rendered == set(), f"docs/api/experiments.md leaves out {sorted(modules - rendered)}"
