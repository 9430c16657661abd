"""The Flower half of ``flower_compare.py``: run in a separate venv with ``flwr[simulation]``; never imports fedhet.

Reads the task written by ``flower_compare.py`` (clients' training tensors, network, optimiser settings), runs FedAvg
with Flower's simulation engine (Ray backend, one CPU per client actor), and writes the final global weights (by
name), the seconds of ``ray.init`` and the seconds of ``run_simulation`` to ``--out``. Ray is started here before
``run_simulation``, which reuses a running Ray, so that its start-up is timed on its own. Each client seeds torch from
(task seed, round, partition) at the start of ``fit``, so shuffles do not depend on which actor runs the client.

Usage (done by ``flower_compare.py``)::

    <flower-venv>/bin/python benchmarks/_flower_side.py --task task.pt --out flower.pt --cpus 2
"""

from __future__ import annotations

import argparse
import os
import time

import ray
import torch
import torch.nn.functional as F
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.simulation import run_simulation
from torch import nn

from _flower_task import make_model


def get_weights(model: nn.Module) -> list:
    return [v.detach().cpu().numpy() for v in model.state_dict().values()]


def set_weights(model: nn.Module, weights: list) -> None:
    keys = list(model.state_dict())
    model.load_state_dict({k: torch.from_numpy(w.copy()) for k, w in zip(keys, weights, strict=True)})


def client_seed(seed: int, server_round: int, partition: int) -> int:
    """The seed of one client's shuffles in one round."""
    return (seed * 1_000_003 + server_round) * 1_000_003 + partition


class Client(NumPyClient):
    """One client: the same local epochs of shuffled SGD minibatches as fedhet's FedAvg."""

    def __init__(self, task: dict, index: int) -> None:
        self.task = task
        self.index = index
        self.x, self.y = task["clients"][index]
        self.model = make_model(task)

    def fit(self, parameters: list, config: dict) -> tuple[list, int, dict]:
        torch.set_num_threads(1)
        torch.manual_seed(client_seed(self.task["seed"], int(config["server_round"]), self.index))
        set_weights(self.model, parameters)
        optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=self.task["lr"],
            momentum=self.task["momentum"],
            weight_decay=self.task["weight_decay"],
        )
        n, batch = len(self.y), self.task["batch_size"]
        for _ in range(self.task["local_epochs"]):
            order = torch.randperm(n)
            for begin in range(0, n, batch):
                index = order[begin : begin + batch]
                loss = F.cross_entropy(self.model(self.x[index]), self.y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        return get_weights(self.model), n, {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    task = torch.load(args.task, weights_only=True)
    torch.manual_seed(task["seed"])
    num_clients = len(task["clients"])
    names = list(make_model(task).state_dict())
    final: dict = {}

    def record_final(server_round: int, weights: list, config: dict) -> None:
        if server_round == task["rounds"]:
            final["weights"] = {n: torch.from_numpy(w.copy()) for n, w in zip(names, weights, strict=True)}

    def server_fn(context: Context) -> ServerAppComponents:
        strategy = FedAvg(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=num_clients,
            min_available_clients=num_clients,
            initial_parameters=ndarrays_to_parameters(get_weights(make_model(task))),
            evaluate_fn=record_final,
            on_fit_config_fn=lambda server_round: {"server_round": server_round},
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=task["rounds"]))

    def client_fn(context: Context):
        return Client(task, int(context.node_config["partition-id"])).to_client()

    # Ray kills workers when the machine's memory is 95% used, whoever uses it; on a shared machine other jobs can
    # take it there, so its memory monitor is off (the peak memory of this run is measured from outside anyway).
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False)
    ray_start = time.perf_counter() - start
    start = time.perf_counter()
    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=num_clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": args.cpus}},
    )
    seconds = time.perf_counter() - start
    torch.save({"weights": final["weights"], "seconds": seconds, "ray_start_seconds": ray_start}, args.out)


if __name__ == "__main__":
    main()
