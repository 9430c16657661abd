"""Progress when output is not a terminal: the run folder, the first round announced, a heartbeat, a line a round."""

import re

from fedhet.callbacks import RichRoundProgress
from fedhet.callbacks.progress import round_line
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer, Processes


def test_round_line_names_the_round_accuracy_loss_clients_and_time():
    metrics = {"val/acc_mean": 0.91234, "train/loss_mean": 0.5, "clients/participants": 4.0, "time/round_s": 1.25}
    assert round_line(2, 10, metrics) == "round 3/10  val/acc_mean 0.9123  train/loss_mean 0.5000  clients 4  1.2 s"
    assert "failed 1" in round_line(0, 1, {"clients/participants": 3.0, "clients/failed": 1.0})


def test_redirected_output_gets_plain_lines(tmp_path, tiny_federation, capsys):
    trainer = FederatedTrainer(
        rounds=2,
        processes=Processes(accelerator="cpu"),
        default_root_dir=str(tmp_path),
        callbacks=[RichRoundProgress(heartbeat_s=0.0)],
    )
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fedhet: fitting FedAvg on 4 clients, rounds 1-2, run folder ")
    assert lines[0].endswith("version_0")
    assert lines[1].startswith("round 1/2: training 4 clients")
    heartbeats = [line.split(": ")[1].split(" in ")[0] for line in lines[2:6]]
    assert heartbeats == [f"{k}/4 clients trained" for k in range(1, 5)]
    ends = [line for line in lines if re.match(r"round \d/2  val/acc_mean", line)]
    assert [line.split()[1] for line in ends] == ["1/2", "2/2"]
    assert f"val/acc_mean {trainer.history[-1]['val/acc_mean']:.4f}" in ends[-1]
    assert sum(line.startswith("round 2/2: training") for line in lines) == 0, "only the first round is announced"
