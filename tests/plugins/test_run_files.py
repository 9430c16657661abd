"""A run's files (issue 28, item 5): version folders held under a lock for a command's life, exports named by an
encoded client id and written atomically, checkpoints loaded as data only and refused in one line when crafted, dead
runs' spill folders removed, and logs that never shrink while a command runs."""

import functools
import http.server
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import warnings
import zipfile

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedAvg, FedRep
from fedhet.plugins.storage.checkpoint import load_checkpoint
from fedhet.plugins.storage.client_store import spill_name
from fedhet.plugins.storage.run_folder import RunFolder, versions
from tests.plugins.test_run_folder import make_trainer, rounds_logged


class AtRoundEnd(FederatedCallback):
    """Runs ``action(round_idx)`` at the end of each round and keeps what it returned or raised."""

    def __init__(self, action):
        self.action = action
        self.outcomes = []

    def on_round_end(self, trainer, round_idx, metrics):
        try:
            self.outcomes.append(self.action(round_idx))
        except Exception as err:  # the test inspects it
            self.outcomes.append(err)


# ---------------------------------------------------------------- the version lock
def test_a_second_resume_of_a_held_version_is_refused_naming_the_holder(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)

    def second_resume(round_idx):
        make_trainer(tmp_path, rounds=3).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")

    probe = AtRoundEnd(second_resume)
    make_trainer(tmp_path, rounds=2, callbacks=[probe]).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    (refused,) = probe.outcomes
    assert isinstance(refused, RuntimeError), refused
    message = str(refused)
    assert "\n" not in message
    assert re.search(rf"version_0 is in use by fedhet fit \(pid {os.getpid()} on ", message), message
    assert rounds_logged(tmp_path / "version_0") == [0, 1]  # each round once
    assert load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt").round == 2
    assert versions(tmp_path) == [0]


def test_the_lock_is_released_when_the_command_ends(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    make_trainer(tmp_path, rounds=2).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    make_trainer(tmp_path, rounds=3).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert rounds_logged(tmp_path / "version_0") == [0, 1, 2]


def test_evaluation_during_a_fit_gets_its_own_folder(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)

    def evaluate(round_idx):
        tester = make_trainer(tmp_path)
        tester.test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path=str(first_ckpt))
        return tester.run_dir.name

    first_ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    probe = AtRoundEnd(evaluate)
    make_trainer(tmp_path, rounds=2, callbacks=[probe]).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert probe.outcomes == ["version_1"]


def test_a_checkpoint_rewritten_before_the_folder_is_held_is_read_again(tmp_path, tiny_federation, monkeypatch):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    make_trainer(tmp_path / "other", rounds=2).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    newer = tmp_path / "other" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    real_hold = RunFolder.hold

    def hold_as_another_command_ends(self, version, command):
        if version == 0 and newer.exists():  # another command's last checkpoint lands as this one takes the folder
            os.replace(newer, ckpt)
        return real_hold(self, version, command)

    monkeypatch.setattr(RunFolder, "hold", hold_as_another_command_ends)
    probe = AtRoundEnd(lambda round_idx: round_idx)
    make_trainer(tmp_path, rounds=3, callbacks=[probe]).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert probe.outcomes == [2]  # resumed from the checkpoint the folder holds once held, not the one read before
    assert load_checkpoint(ckpt).round == 3


@pytest.mark.distributed
def test_two_processes_export_every_client_and_share_a_refusal(tmp_path):
    from tests.integrations.test_distributed import run_cli

    run_cli(tmp_path, "run", "FedRep", rounds=1, devices=2)
    root = tmp_path / "run"
    command = [sys.executable, "-m", "fedhet"]
    options = [
        "-c",
        str(tmp_path / "FedRep.yaml"),
        "--trainer.processes.devices",
        "2",
        "--trainer.default_root_dir",
        str(root),
    ]
    options += ["--ckpt_path", "last"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*command, "export", *options], check=True, env=env, timeout=300, capture_output=True)
    clients = root / "version_0" / "clients"
    index = json.loads((clients / "index.json").read_text())
    assert len(index) == 5  # rank 1's clients too
    assert all((clients / name).is_file() for name in index.values())
    holder = RunFolder(root)
    holder.hold(0, "fit")  # another command holds the run: both processes of the resume stop, neither waits
    try:
        refused = subprocess.run(
            [*command, "fit", *options, "--trainer.rounds", "2"], env=env, timeout=300, capture_output=True, text=True
        )
    finally:
        holder.release()
    assert refused.returncode == 1
    (line,) = {line for line in refused.stderr.splitlines() if line.startswith("fedhet: error:")}  # each process's
    assert re.search(rf"version_0 is in use by fedhet fit \(pid {os.getpid()} on ", line), line


# ---------------------------------------------------------------- exports
ODD_IDS = ["../../escaped", "a/b", "/tmp/abs", "A", "a", ".hidden", "x" * 250, "ümlaut site"]


def odd_federation():
    gen = torch.Generator().manual_seed(0)
    data = {cid: (torch.randn(12, 4, generator=gen), torch.randint(0, 2, (12,), generator=gen)) for cid in ODD_IDS}
    return FederatedDataModule.from_tensors(data, num_classes=2, batch_size=4, val_fraction=0.0, test_fraction=0.25)


def test_export_names_files_by_an_encoded_client_id_inside_the_run(tmp_path):
    root = tmp_path / "deep" / "er" / "runs"
    trainer = make_trainer(root, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[4]), odd_federation())
    before = {p for p in tmp_path.rglob("*")}
    written = make_trainer(root).export(FedAvg(hidden_dims=[4]), odd_federation(), ckpt_path="last")
    clients = root / "version_0" / "clients"
    assert set(written) == set(ODD_IDS)
    assert {p.parent for p in written.values()} == {clients}
    new = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(clients) or p == clients for p in new), sorted(map(str, new))
    index = json.loads((clients / "index.json").read_text())
    assert {cid: clients / name for cid, name in index.items()} == written
    for cid, path in written.items():
        assert FedAvg.load_from_checkpoint(path).client_spec.client_id == cid


def test_an_export_killed_while_writing_leaves_the_previous_one(tmp_path, tiny_federation, monkeypatch):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = trainer.export_client("a", tmp_path / "a.ckpt")
    good = path.read_bytes()
    real_save = torch.save

    def killed_midway(obj, f, *args, **kwargs):
        real_save({"partial": 1}, f)
        raise KeyboardInterrupt  # as a signal would, mid-write

    monkeypatch.setattr(torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        trainer.export_client("a", path)
    monkeypatch.setattr(torch, "save", real_save)
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["a.ckpt"]


def test_export_writes_beside_the_run_it_exports_without_a_new_version(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    config = (tmp_path / "version_0" / "metrics.csv").read_bytes()
    exporter = make_trainer(tmp_path)
    exporter.run_config = {"trainer": {"rounds": 99}}  # as the CLI sets it: not written over the run's config
    written = exporter.export(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert versions(tmp_path) == [0]
    assert {p.parent for p in written.values()} == {tmp_path / "version_0" / "clients"}
    assert (tmp_path / "version_0" / "metrics.csv").read_bytes() == config
    assert not (tmp_path / "version_0" / "config.yaml").exists()


# ---------------------------------------------------------------- checkpoints are data
class _Marker:
    def __reduce__(self):
        return (os.mkdir, (MARKER_PATH[0],))


MARKER_PATH = [""]


@pytest.fixture
def http_folder(tmp_path, monkeypatch):
    """A folder served over HTTP on localhost: its URL."""
    served = tmp_path / "served"
    served.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_checkpoint_served_over_http_runs_no_pickled_code(tmp_path, http_folder):
    served, url = http_folder
    MARKER_PATH[0] = str(tmp_path / "code_ran")
    torch.save({"state_dict": {}, "hyper_parameters": {"x": _Marker()}}, served / "evil.ckpt")
    with pytest.raises(Exception):  # noqa: B017, PT011 - refused in some way; what matters is that nothing ran
        FedAvg.load_from_checkpoint(f"{url}/evil.ckpt")
    assert not (tmp_path / "code_ran").exists()


def test_an_export_served_over_http_loads_with_its_client(tmp_path, tiny_federation, http_folder):
    served, url = http_folder
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    trainer.export_client("b", served / "b.ckpt")
    restored = FedRep.load_from_checkpoint(f"{url}/b.ckpt")
    assert restored.client_spec == tiny_federation.specs["b"]
    torch.testing.assert_close(restored.state_dict(), trainer.client_module("b").state_dict())


def _nested_pickle(fields, depth):
    """The pickle of ``fields`` with its value ``"NESTED"`` replaced by a list nested ``depth`` deep, written without
    recursing (as a crafted file is)."""
    placeholder = b"X\x06\x00\x00\x00NESTED"  # BINUNICODE "NESTED"
    nested = b"]" * depth + b"a" * (depth - 1)
    body = pickle.dumps(fields, protocol=2).replace(placeholder, nested, 1)
    assert pickle.loads(body)  # a valid pickle
    return body


def _replace_pickle(path, body):
    """Rewrite a torch zip file with its ``data.pkl`` replaced by ``body``."""
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    name = next(n for n in entries if n.endswith("/data.pkl"))
    entries[name] = body
    with zipfile.ZipFile(path, "w") as archive:
        for entry, data in entries.items():
            archive.writestr(entry, data)


def test_a_deeply_nested_federation_checkpoint_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"round": 1}, path)  # a torch file whose pickle is replaced below
    fields = {"format": "fedhet-federation-checkpoint", "version": 2, "sha256": "0" * 64, "state": {"x": "NESTED"}}
    _replace_pickle(path, _nested_pickle(fields, 100_000))
    with pytest.raises(ValueError, match=r"last\.ckpt.*nest"):
        load_checkpoint(path)


def test_a_deeply_nested_export_is_refused_naming_the_file(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = trainer.export_client("a", tmp_path / "a.ckpt")
    fields = torch.load(path, weights_only=True)
    fields.update(state_dict={}, hyper_parameters={"hidden_dims": "NESTED"})
    _replace_pickle(path, _nested_pickle(fields, 100_000))
    with pytest.raises(ValueError, match=r"a\.ckpt.*nest"):
        FedAvg.load_from_checkpoint(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("input_shape", [10**12]),
        ("input_shape", [-3]),
        ("num_classes", "3"),
        ("classes", [0, 99]),
        ("num_train", -5),
        ("feature_blocks", [["x"]]),
        ("client_id", None),
    ],
)
def test_crafted_client_spec_fields_are_refused_naming_the_file_and_field(tmp_path, tiny_federation, field, value):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = trainer.export_client("a", tmp_path / "a.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["fedhet_client_spec"][field] = value
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=rf"a\.ckpt.*field '{field}'"):
        FedAvg.load_from_checkpoint(path)


def test_a_missing_client_spec_field_is_refused_naming_it(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = trainer.export_client("a", tmp_path / "a.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["fedhet_client_spec"]["num_classes"]
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=r"a\.ckpt.*field 'num_classes' is missing"):
        FedAvg.load_from_checkpoint(path)


HUGE_LAYERS = """
import json, resource, sys
from fedhet.modules import FedAvg

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

FedAvg.load_from_checkpoint(sys.argv[1])  # the honest file: every import and its own peak first
before = peak_mib()
try:
    FedAvg.load_from_checkpoint(sys.argv[2])
    error = None
except ValueError as err:
    error = str(err)
print(json.dumps({"grown_mib": peak_mib() - before, "error": error}))
"""


def test_hyperparameters_that_build_more_than_the_file_holds_are_refused_before_allocating(tmp_path, tiny_federation):
    """At 9390786 ``hidden_dims [60000, 60000]`` in a 2,909-byte export made the load try to allocate 14.4 GB."""
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    honest = trainer.export_client("a", tmp_path / "a.ckpt")
    checkpoint = torch.load(honest, weights_only=True)
    checkpoint["hyper_parameters"]["hidden_dims"] = [8000, 8000]  # a 256 MB middle layer; the file's tensors unchanged
    crafted = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, crafted)
    done = subprocess.run(
        [sys.executable, "-c", HUGE_LAYERS, str(honest), str(crafted)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert re.search(r"crafted\.ckpt.*tensor 'body\.\d\.weight' of shape \(8000, ", measured["error"] or ""), measured
    assert measured["grown_mib"] < 64, measured  # nothing of the 8000-wide layers was allocated


def test_a_checkpoint_missing_a_tensor_its_hyperparameters_build_is_refused_naming_it(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    path = trainer.export_client("a", tmp_path / "a.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"].pop("head.bias")
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=r"a\.ckpt.*tensor 'head\.bias', which it does not hold"):
        FedAvg.load_from_checkpoint(path)
    assert FedAvg.load_from_checkpoint(path, strict=False).head.bias.shape == (tiny_federation.num_classes,)


# ---------------------------------------------------------------- dead runs' spill folders
def test_a_resumed_run_removes_the_spill_folders_of_dead_runs(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    client_state = tmp_path / "version_0" / "client_state"
    dead = client_state / "20260101-000000-deadbeef-rank0"  # what a SIGKILLed run leaves: states and a free lock
    dead.mkdir(parents=True)
    (dead / spill_name("a")).write_bytes(b"stale")
    (client_state / f"{dead.name}.lock").write_bytes(b"")
    kept = client_state / "kept-rank0"  # a finished run's keep_client_state folder (no lock file): not ours
    kept.mkdir()
    (kept / spill_name("b")).write_bytes(b"kept")
    make_trainer(tmp_path, rounds=2, client_state_budget_mb=0.0).fit(
        FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last"
    )
    assert not dead.exists()
    assert not (client_state / f"{dead.name}.lock").exists()
    assert (kept / spill_name("b")).read_bytes() == b"kept"


# ---------------------------------------------------------------- logs
def test_a_resumed_run_keeps_the_earlier_rounds_log_while_it_runs(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=2).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    folder = tmp_path / "version_0"
    probe = AtRoundEnd(lambda round_idx: rounds_logged(folder) if (folder / "metrics.csv").exists() else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tmp_path, rounds=4, callbacks=[probe]).fit(
            FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last"
        )
    assert probe.outcomes == [[0, 1], [0, 1, 2]]
    assert rounds_logged(folder) == [0, 1, 2, 3]
    assert not [w for w in caught if "will be deleted" in str(w.message)]


def test_an_evaluation_in_a_new_folder_is_not_warned_about_deleted_logs(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    tester = make_trainer(tmp_path)
    tester.run_config = {"trainer": {"rounds": 1}}  # as the CLI sets it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tester.test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert not [w for w in caught if "will be deleted" in str(w.message)]
    assert rounds_logged(tmp_path / "version_1") == [1]


def test_the_log_is_appended_and_a_row_cut_short_by_a_kill_is_dropped(tmp_path):
    from fedhet.plugins.storage.run_folder import _RunLogWriter

    writer = _RunLogWriter(str(tmp_path))
    for step in range(3):
        writer.log_metrics({"loss": float(step)}, step=step)
        writer.save()
    with (tmp_path / "metrics.csv").open("a") as f:
        f.write("0.5,")  # a kill while appending step 3
    resumed = _RunLogWriter(str(tmp_path))
    resumed.log_metrics({"loss": 3.0, "acc": 1.0}, step=3)
    resumed.save()
    assert rounds_logged(tmp_path) == [0, 1, 2, 3]
