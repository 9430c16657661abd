"""The run record (issue 39, item 2): each command's ``record.json`` names fedhet's commit, the environment, the
threads, the data and config digests, the CPU seconds by part and the modules it imported; read back typed, refused
when damaged."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedhet
from fedhet.core import provenance
from fedhet.core.provenance import environment_id, source_tree, user_code_digests
from fedhet.modules import FedAvg
from fedhet.plugins.storage.run_record import RECORD_FILE, config_sha256, last_record, read_records
from tests.plugins.test_run_folder import make_trainer

PACKAGE = Path(fedhet.__file__).resolve().parent


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout.strip()


def test_fit_and_test_each_record_provenance_threads_and_cpu_by_part(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=2)
    model = FedAvg(hidden_dims=[8])
    trainer.fit(model, tiny_federation)
    trainer.test(model, tiny_federation, ckpt_path="last")
    make_trainer(tmp_path, rounds=2).test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    fit, test = read_records(tmp_path / "version_0"), last_record(tmp_path / "version_1", "test")
    assert [r.command for r in fit] == ["fit", "test"]  # the same trainer tests in its fit's folder
    fit = fit[0]
    assert test is not None
    assert (fit.command, fit.rounds_done, fit.rounds_trained) == ("fit", 2, 2)
    assert (test.command, test.rounds_done, test.rounds_trained) == ("test", 2, 0)
    assert fit.threads == test.threads == torch.get_num_threads()
    assert fit.environment["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert fit.environment["torch"] == torch.__version__
    assert fit.fedhet_version == fedhet.__version__
    assert fit.commit == _git(PACKAGE, "rev-parse", "HEAD")
    assert min(fit.cpu.startup, fit.cpu.rounds, fit.cpu.evaluation) > 0
    assert (test.cpu.rounds, test.cpu.evaluation > 0) == (0, True)
    assert fit.data_sha256 is not None
    assert fit.data_sha256 == test.data_sha256
    trainer_file = PACKAGE / "plugins" / "rounds" / "trainer.py"
    assert fit.sources["fedhet.plugins.rounds.trainer"] == hashlib.sha256(trainer_file.read_bytes()).hexdigest()
    assert FedAvg.__module__ in fit.sources
    assert not any(name.split(".")[0] in ("torch", "lightning") for name in fit.sources)


def test_the_commit_is_the_installed_packages_whatever_the_working_directory(tmp_path):
    code = "from fedhet.core.provenance import source_tree; print(source_tree().commit)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == _git(PACKAGE, "rev-parse", "HEAD")


def test_dirty_means_uncommitted_changes_to_the_package_only(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    package = repo / "src" / "fedhet"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (repo / "table.md").write_text("a table\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        _git(repo, *args)
    monkeypatch.setattr(fedhet, "__file__", str(package / "__init__.py"))
    source_tree.cache_clear()
    try:
        assert source_tree().commit == _git(repo, "rev-parse", "HEAD")
        (repo / "table.md").write_text("a table, rewritten by a suite\n")  # outside the package: not dirty
        source_tree.cache_clear()
        assert source_tree().dirty is False
        (package / "__init__.py").write_text("x = 2\n")
        source_tree.cache_clear()
        assert source_tree().dirty is True
    finally:
        source_tree.cache_clear()


def test_a_config_digest_ignores_where_the_run_writes():
    config = {"trainer": {"default_root_dir": "/one/checkout/runs", "rounds": 2}, "ckpt_path": "last"}
    moved = {"trainer": {"default_root_dir": "/another/place", "rounds": 2}}
    assert config_sha256(config) == config_sha256(moved)
    assert config_sha256(config) != config_sha256({"trainer": {"default_root_dir": "/another/place", "rounds": 3}})


def test_environment_ids_differ_with_the_kernels():
    env = provenance.environment()
    assert environment_id(env) == environment_id(dict(env))
    assert environment_id(env) != environment_id({**env, "cpu_capability": "DEFAULT"})


@pytest.mark.parametrize(
    ("text", "field"),
    [("{not json", "not valid JSON"), ('[{"format": 1, "command": "fit"}]', "field missing"), ("{}", "not a list")],
)
def test_a_damaged_record_is_refused_in_one_line_naming_the_file(tmp_path, text, field):
    (tmp_path / RECORD_FILE).write_text(text)
    with pytest.raises(ValueError, match=field) as refused:
        read_records(tmp_path)
    assert RECORD_FILE in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_mistyped_field_is_refused(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = tmp_path / "version_0" / RECORD_FILE
    data = json.loads(path.read_text())
    path.write_text(json.dumps([{**data[0], "threads": "many"}]))
    with pytest.raises(ValueError, match="field 'threads'"):
        read_records(tmp_path / "version_0")


def test_user_code_is_every_file_of_the_packages_a_class_path_names(tmp_path):
    package = tmp_path / "mydata"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sites.py").write_text("from mydata.helpers import scale\n")
    (package / "helpers.py").write_text("def scale(x):\n    return x\n")
    (tmp_path / "other.py").write_text("")
    named = ["mydata.sites.SiteFederation", "fedhet.modules.FedAvg"]
    before = user_code_digests(named, [tmp_path])
    assert sorted(before) == ["mydata/__init__.py", "mydata/helpers.py", "mydata/sites.py"]
    (package / "helpers.py").write_text("def scale(x):\n    return 2 * x\n")  # a module the named one imports
    assert user_code_digests(named, [tmp_path])["mydata/helpers.py"] != before["mydata/helpers.py"]
    assert user_code_digests(["fedhet.modules.FedAvg"], [tmp_path]) == {}


def test_data_files_read_are_named_by_their_path_in_the_repository(tmp_path):
    bundled = PACKAGE / "datamodules" / "datasets" / "data" / "cleveland.csv"
    provenance.note_read(bundled, bundled.read_bytes())
    outside = tmp_path / "covtype.data"
    outside.write_bytes(b"1,2\n")
    provenance.note_read(outside, outside.read_bytes())  # no folder of this machine in a record
    read = provenance.files_read()
    assert (
        read["src/fedhet/datamodules/datasets/data/cleveland.csv"] == hashlib.sha256(bundled.read_bytes()).hexdigest()
    )
    assert read["<outside>/covtype.data"] == hashlib.sha256(b"1,2\n").hexdigest()
