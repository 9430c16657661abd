"""The trainer's policies as objects, its shorthands, and its grouped options."""

import inspect

import pytest

from fedhet.cli import main
from fedhet.core import ClientFailure
from fedhet.modules import FedAvg
from fedhet.plugins import (
    Checkpointing,
    ClientStates,
    CoordinateMedian,
    Faults,
    FederatedTrainer,
    FiniteUpload,
    PlainUpdate,
    PrivateUpdate,
    Processes,
    Reporting,
    SequentialRunner,
    StackedRunner,
    TimeBudget,
    UploadPrivacy,
)

QUIET = {"processes": Processes(accelerator="cpu"), "reporting": Reporting(progress_bar=False), "logger": False}


class RefuseClient:
    """A user's upload check: client ``client_id``'s uploads never join the aggregate."""

    def __init__(self, client_id):
        self.client_id = client_id
        self.seen = []

    def reject(self, update, seconds):
        self.seen.append(update.client_id)
        if update.client_id == self.client_id:
            return ClientFailure(update.client_id, "invalid", "refused by the user's check")
        return None


def test_the_trainer_takes_at_most_16_arguments():
    assert len(inspect.signature(FederatedTrainer).parameters) <= 16


def test_shorthands_resolve_to_policy_objects():
    trainer = FederatedTrainer(seed=7, server_update=CoordinateMedian(), processes=Processes(stack_clients=4))
    assert isinstance(trainer.server_update, PlainUpdate)
    assert isinstance(trainer.server_update.aggregator, CoordinateMedian)
    assert isinstance(trainer.runner, StackedRunner)
    assert trainer.runner.size == 4
    private = FederatedTrainer(seed=7, server_update=UploadPrivacy(1.0, 1.0), faults=Faults(client_time_budget_s=2.0))
    assert isinstance(private.server_update, PrivateUpdate)
    assert private.server_update.seed == 7
    assert [type(check) for check in private.upload_checks] == [FiniteUpload, TimeBudget]
    assert private.upload_checks[1].budget_s == 2.0
    assert isinstance(private.runner, SequentialRunner)
    seeded = FederatedTrainer(seed=3, server_update=PrivateUpdate(UploadPrivacy(1.0, 1.0), seed=11))
    assert seeded.server_update.seed == 11  # a seed the user gave is kept
    assert FederatedTrainer().server_update is None  # the module's aggregator, known once fit starts


def test_a_shorthand_beside_its_object_is_refused():
    with pytest.raises(ValueError, match="'processes.stack_clients' is a shorthand for 'runner'"):
        FederatedTrainer(runner=SequentialRunner(), processes=Processes(stack_clients=2))
    with pytest.raises(ValueError, match="a stacked runner .* cannot both be set"):
        FederatedTrainer(runner=StackedRunner(2), upload_checks=[TimeBudget(1.0)])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Processes(start_method="spawn"), "processes: field 'start_method' must be 'auto', 'fork' or 'popen'"),
        (lambda: Processes(stack_clients=0), "processes: field 'stack_clients' must be at least 1 or None, got 0"),
        (lambda: Checkpointing(every=-1), "checkpointing: field 'every' must be >= 0, got -1"),
        (lambda: Faults(max_client_failures=1.5), "faults: field 'max_client_failures' must be in [0, 1], got 1.5"),
        (lambda: Faults(client_time_budget_s=0), "faults: field 'client_time_budget_s' must be positive or None"),
        (lambda: ClientStates(personal_init="each"), "field 'personal_init' must be 'shared', 'per_architecture' or"),
        (lambda: ClientStates(budget_mb=-1.0), "client_state: field 'budget_mb' must be >= 0"),
        (lambda: Reporting(eval_every=0), "reporting: field 'eval_every' must be at least 1, got 0"),
    ],
)
def test_each_group_refuses_its_bad_fields_naming_them(make, message):
    with pytest.raises(ValueError, match="FederatedTrainer: ") as err:
        make()
    assert message in str(err.value)


def test_a_user_upload_check_leaves_its_client_out(tmp_path, tiny_federation):
    check = RefuseClient("b")
    trainer = FederatedTrainer(rounds=2, upload_checks=[check], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert sorted(set(check.seen)) == ["a", "b", "c", "d"]  # every admitted-so-far upload reaches the user's check
    assert [row["clients/failed"] for row in trainer.history] == [1.0, 1.0]
    assert [row["clients/participants"] for row in trainer.history] == [3.0, 3.0]


def test_help_lists_each_option_group_under_its_own_heading(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    for heading in (
        "accelerator, devices, nodes, how processes start, precision, stacking",
        "when the federation is saved",
        "how many failing clients a round survives",
        "how personal layers start",
        "how often clients are evaluated",
    ):
        assert heading in out
    assert "--trainer.processes.devices" in out
    assert "--trainer.accelerator" not in out
