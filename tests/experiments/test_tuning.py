"""Tuning on validation only: search spaces, seeded TPE, pruning a real federation, one study shared by processes."""

import csv
import json
import multiprocessing
import os
import subprocess
import sys

import optuna
import pytest

from fedhet.cli import FederatedCLI
from fedhet.experiments.pruning import OptunaPruning, was_pruned
from fedhet.experiments.search_space import Categorical, FloatRange, IntRange
from fedhet.experiments.trials import PRUNED_FILE
from fedhet.experiments.tuning import OWNER_ATTR, SearchSpace, objective_value, tune
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer
from tests.experiments import shared_study_worker as worker
from tests.test_cli import FEDAVG, tiny
from tests.trainer_options import trainer_options

X = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "test")


def parabola(overrides, handle):
    return -((overrides["x"] - 0.3) ** 2)


# ---------------------------------------------------------------------------------------------------- search spaces
def test_a_search_space_reads_floats_ints_and_categoricals():
    space = SearchSpace.parse(
        {
            "model.init_args.lr": {"type": "float", "low": 1e-3, "high": 0.3, "log": True},
            "trainer.local_epochs": {"type": "int", "low": 1, "high": 5, "step": 2},
            "model.init_args.hidden_dims": {"type": "categorical", "choices": [[64], [64, 64]]},
        },
        "suite.yaml: methods.fedavg",
    )
    assert space.params == {
        "model.init_args.lr": FloatRange(1e-3, 0.3, log=True),
        "trainer.local_epochs": IntRange(1, 5, step=2),
        "model.init_args.hidden_dims": Categorical(([64], [64, 64])),
    }
    overrides = space.suggest(optuna.create_study().ask())
    assert 1e-3 <= overrides["model.init_args.lr"] <= 0.3
    assert overrides["trainer.local_epochs"] in (1, 3, 5)
    assert overrides["model.init_args.hidden_dims"] in ([64], [64, 64])  # list choices come back as lists


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"lr": {"type": "float", "low": 0.1}}, "key 'lr': field 'high' is missing"),
        ({"lr": {"type": "float", "low": 0.5, "high": 0.1}}, "key 'lr': field 'high' must be above low = 0.5"),
        ({"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, "key 'lr': field 'low' must be above 0"),
        ({"lr": {"type": "float", "low": "a", "high": 1.0}}, "key 'lr': field 'low' must be a finite number"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "log": "yes"}}, "key 'lr': field 'log' must be true or false"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "step": 0.1}}, "key 'lr': field 'step' is not a field"),
        ({"e": {"type": "int", "low": 1.5, "high": 3}}, "key 'e': field 'low' must be a finite integer"),
        ({"e": {"type": "int", "low": 1, "high": 8, "step": 2, "log": True}}, "key 'e': field 'step' must be 1"),
        ({"e": {"type": "int", "low": 1, "high": 8, "step": 0}}, "key 'e': field 'step' must be at least 1"),
        ({"o": {"type": "categorical", "choices": []}}, "key 'o': field 'choices' must be a non-empty list"),
        ({"o": {"type": "choice", "choices": [1]}}, "key 'o': field 'type' must be one of"),
        ({"o": [1, 2]}, "key 'o': field 'type' needs a mapping"),
        ({"model..lr": {"type": "float", "low": 0, "high": 1}}, "key 'model..lr' must be a dotted config key"),
        ({}, "a search space must be a non-empty mapping"),
    ],
)
def test_a_bad_search_space_is_named_in_one_line(spec, expected):
    with pytest.raises(ValueError, match="^suite.yaml: methods.fedavg") as err:
        SearchSpace.parse(spec, "suite.yaml: methods.fedavg")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------------- TPE
LOG_LR = {"type": "float", "low": 0.01, "high": 0.5, "log": True}
LIN_LR = {"type": "float", "low": 0.01, "high": 0.5}
EPOCHS = {"type": "int", "low": 1, "high": 10}


@pytest.mark.parametrize(
    ("spec", "value", "end"),
    [
        (LOG_LR, 0.421, "high"),  # log position ln(42.1) / ln(50) = 0.956
        (LOG_LR, 0.139, None),  # 0.672
        (LOG_LR, 0.0146, "low"),  # ln(1.46) / ln(50) = 0.097
        (LIN_LR, 0.0585, "low"),  # (0.0585 - 0.01) / 0.49 = 0.099
        (LIN_LR, 0.0595, None),  # 0.101
        (LIN_LR, 0.46, "high"),  # 0.918
        (EPOCHS, 1, "low"),
        (EPOCHS, 2, None),  # 1 / 9 = 0.111
        (EPOCHS, 10, "high"),
        ({"type": "int", "low": 3, "high": 3}, 3, None),  # a range of one value
        ({"type": "categorical", "choices": [0.01, 0.5]}, 0.5, None),
    ],
)
def test_a_value_at_an_end_of_its_range_is_named(spec, value, end):
    space = SearchSpace.parse({"model.init_args.x": spec}, "suite.yaml")
    assert space.at_edges({"model.init_args.x": value}) == ({} if end is None else {"model.init_args.x": end})


def test_tpe_with_a_seed_repeats_its_trials_and_finds_the_maximum():
    runs = [tune(f"p{k}", X, parabola, n_trials=20, storage=None, seed=seed) for k, seed in enumerate((3, 3, 4))]
    drawn = [[t.overrides["x"] for t in run.trials] for run in runs]
    assert drawn[0] == drawn[1] != drawn[2]
    assert abs(runs[0].best_overrides["x"] - 0.3) < 0.05
    assert runs[0].best_value == max(parabola(t.overrides, None) for t in runs[0].trials)
    assert [t.number for t in runs[0].trials] == list(range(20))


@pytest.mark.parametrize("kind", ["journal.log", "journal.jsonl", "sqlite"])
def test_a_resumed_study_counts_the_trials_it_already_holds(tmp_path, kind):
    storage = f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite" else str(tmp_path / kind)
    calls = []

    def counted(overrides, handle):
        calls.append(handle.number)
        return parabola(overrides, handle)

    tune("resume", X, counted, n_trials=3, storage=storage, seed=0)
    result = tune("resume", X, counted, n_trials=5, storage=storage, seed=0)
    assert calls == [0, 1, 2, 3, 4]
    assert len(result.trials) == 5
    assert len(tune("resume", X, counted, n_trials=5, storage=storage, seed=0).trials) == 5
    assert len(calls) == 5


def test_a_trial_left_running_by_a_killed_process_is_released(tmp_path):
    storage = str(tmp_path / "study.log")
    tune("killed", X, parabola, n_trials=1, storage=storage, seed=0)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    study = optuna.load_study(
        study_name="killed", storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    )
    orphan = study.ask()
    orphan.set_user_attr(OWNER_ATTR, f"{os.uname().nodename}:{gone.pid}")
    result = tune("killed", X, parabola, n_trials=2, storage=storage, seed=0)
    assert [t.state for t in result.trials] == ["COMPLETE", "FAIL", "COMPLETE"]


def test_a_storage_that_is_neither_a_journal_file_nor_a_url_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"field 'storage' is '.*study.txt': give a journal file ending in .log"):
        tune("bad", X, parabola, n_trials=1, storage=str(tmp_path / "study.txt"), seed=0)


# ---------------------------------------------------------------------------------------------------- pruning
def federation_fit(tmp_path, tiny_federation, callback, rounds=3):
    trainer = FederatedTrainer(**trainer_options(
        rounds=rounds, default_root_dir=str(tmp_path), accelerator="cpu", enable_progress_bar=False, logger=False,
        checkpoint_every=0, callbacks=[callback], seed=0,
    ))  # fmt: skip
    trainer.fit(FedAvg(hidden_dims=[8], lr=0.1), tiny_federation)
    return trainer


@pytest.mark.parametrize("reference", [1.0, 0.0])
@pytest.mark.parametrize("reach", ["storage", "handle"])
def test_the_callback_prunes_a_real_federation_worse_than_the_median(tmp_path, tiny_federation, reference, reach):
    """Trial 0 reports ``reference`` every round; trial 1 is a 3-round FedAvg fit reporting to the study.

    ``storage``: the callback opens the journal file, as ``fedhet fit`` in another process does; ``handle``: it is
    bound to the live trial of an in-memory study.
    """
    storage = str(tmp_path / "study.log") if reach == "storage" else None
    fits = []

    def objective(overrides, handle):
        if handle.number == 0:
            for step in range(3):
                handle.report(reference, step)
            return reference
        # "storage": as `fedhet fit` builds it from handle.cli_args()
        callback = OptunaPruning(storage, handle.study_name, handle.number) if storage else handle.callback()
        trainer = federation_fit(tmp_path / "runs", tiny_federation, callback)
        fits.append(trainer)
        return objective_value(trainer.history, "val/acc_mean")

    result = tune("prune", X, objective, n_trials=2, storage=storage, seed=0, pruner_startup_trials=1, warmup_rounds=0)
    (trainer,) = fits
    accuracy = trainer.history[0]["val/acc_mean"]
    assert 0.0 < accuracy < 1.0
    if reference == 1.0:  # worse than the other trial's round 0: pruned after it
        assert len(trainer.history) == 1
        assert was_pruned(trainer.run_dir)
        assert (result.trials[1].state, result.trials[1].pruned_round) == ("PRUNED", 0)
        assert result.best_overrides == result.trials[0].overrides
    else:
        assert len(trainer.history) == 3
        assert not (trainer.run_dir / PRUNED_FILE).exists()
        assert result.trials[1].state == "COMPLETE"
        assert result.best_value == trainer.history[-1]["val/acc_mean"]


def test_cli_args_add_the_callback_to_fedhet_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])  # LightningCLI warns when given args beside pytest's own
    storage = str(tmp_path / "study.log")
    seen = []

    def objective(overrides, handle):
        cli = FederatedCLI(args=["-c", FEDAVG, *handle.cli_args(monitor="val/acc_worst")], run=False)
        seen.extend(cb for cb in cli.trainer.user_callbacks if isinstance(cb, OptunaPruning))
        return 0.0

    tune("cli", X, objective, n_trials=1, storage=storage, seed=0)
    (callback,) = seen
    assert (callback.storage, callback.study_name, callback.trial_number, callback.monitor) == (
        storage,
        "cli",
        0,
        "val/acc_worst",
    )


@pytest.mark.slow
def test_a_fedhet_fit_in_another_process_is_pruned_through_the_journal(tmp_path):
    """Trial 0 reports a perfect accuracy every round; trial 1 runs `fedhet fit` with its cli_args and is pruned."""
    storage = str(tmp_path / "study.log")
    run_dirs = []

    def objective(overrides, handle):
        if handle.number == 0:
            for step in range(3):
                handle.report(1.0, step)
            return 1.0
        root = tmp_path / f"trial_{handle.number}"
        command = [sys.executable, "-m", "fedhet", "fit", "-c", FEDAVG, *tiny(root, rounds=3), *handle.cli_args()]
        subprocess.run(command, check=True, capture_output=True, cwd=tmp_path, timeout=300)
        run_dirs.append(root / "version_0")
        return 0.0

    result = tune("fit", X, objective, n_trials=2, storage=storage, seed=0, pruner_startup_trials=1, warmup_rounds=0)
    (run_dir,) = run_dirs
    assert json.loads((run_dir / PRUNED_FILE).read_text())["round"] == 0
    assert (result.trials[1].state, result.trials[1].pruned_round) == ("PRUNED", 0)
    rounds = [row for row in csv.DictReader((run_dir / "metrics.csv").open()) if row.get("val/acc_mean")]
    assert len(rounds) == 1  # stopped after the pruned round


def test_cli_args_need_a_shared_storage():
    def objective(overrides, handle):
        handle.cli_args()

    with pytest.raises(ValueError, match="in memory"):
        tune("memory", X, objective, n_trials=1, storage=None, seed=0)


# ---------------------------------------------------------------------------------------------------- validation only
def test_test_metrics_are_refused(tmp_path):
    with pytest.raises(ValueError, match="field 'monitor' is 'test/acc_mean', a test metric"):
        OptunaPruning("study.log", "s", 0, monitor="test/acc_mean")
    with pytest.raises(ValueError, match="field 'metric' is 'test_new/acc_mean', a test metric"):
        objective_value([{"test_new/acc_mean": 1.0}], "test_new/acc_mean")

    def objective(overrides, handle):
        handle.cli_args(monitor="test/acc_mean")

    with pytest.raises(ValueError, match="a test metric"):
        tune("refuse", X, objective, n_trials=1, storage=str(tmp_path / "study.log"), seed=0)


def test_a_run_without_a_validation_split_is_named():
    with pytest.raises(ValueError, match="no validation split: set data.init_args.val_fraction"):
        objective_value([{"train/loss_mean": 1.0, "test/acc_mean": 0.9}], "val/acc_mean")


# ---------------------------------------------------------------------------------------------------- shared study
@pytest.mark.distributed
def test_two_processes_share_one_study_through_a_journal_file(tmp_path):
    storage = str(tmp_path / "study.log")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    processes = [context.Process(target=worker.run, args=(storage, str(tmp_path), barrier, 0)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0, 0]
    study = optuna.load_study(
        study_name="shared", storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    )
    assert sorted(t.number for t in study.trials) == list(range(worker.N_TRIALS))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    owners = {(tmp_path / f"trial_{t.number}").read_text() for t in study.trials}
    assert owners == {str(p.pid) for p in processes}  # both took part
    assert len({t.params["x"] for t in study.trials}) == worker.N_TRIALS  # each process drew its own points
