"""A stand-in for Flower's grid as fedhet's server sees it, each node's real ``ClientApp`` behind it, one node hostile.

Used by the tests of a deployed federation's server against nodes it does not trust
(``tests/integrations/test_hostile_nodes.py``, ``tests/integrations/test_flower_seating.py``): the server is fedhet's
own (``serve``: its node seating, per-client reply decoding and checks, the engine's round), the transport this grid.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedhet.integrations.flower.apps import make_client_app, serve
from tests.integrations.flower_helpers import FEDERATIONS

CLIENTS = ("client_000", "client_001", "client_002")
HOSTILE = 2  # the node of client_002
CONFIG = """
trainer:
  rounds: 2
  seed: 3
  processes:
    accelerator: cpu
  faults:
    max_client_failures: 0.4
  reporting:
    progress_bar: false
  default_root_dir: {root}
model:
  class_path: {model}
data:
  class_path: fedhet.datamodules.DigitsFederation
  init_args: {{num_clients: 3, alpha: 0.5, val_fraction: 0.2, test_fraction: 0.2, seed: 1}}
"""

#: ``attack(message type, reply content) -> new content``, or ``None`` to send no reply at all.
Attack = Callable[[str, RecordDict], "RecordDict | None"]


class StandInGrid:
    """Flower's grid as the server sees it, with each node's real ``ClientApp`` behind it and one node hostile."""

    def __init__(self, config: Path, attack: Attack | None = None, describe: Callable | None = None) -> None:
        self.app = make_client_app(config)
        self.attack = attack
        self.describe = describe
        self.states = {node: RecordDict() for node in range(len(CLIENTS))}

    def get_node_ids(self) -> list[int]:
        return list(self.states)

    def send_and_receive(self, messages, timeout=None):
        for message in messages:
            node = message.metadata.dst_node_id
            context = Context(
                run_id=1,
                node_id=node,
                node_config={"client-id": CLIENTS[node]},
                state=self.states[node],
                run_config={},
            )
            reply = self.app(message, context)
            if node != HOSTILE:
                yield reply
                continue
            kind = message.metadata.message_type
            if kind == "query" and self.describe is not None:
                yield Message(self.describe(reply.content), reply_to=message)
            elif kind != "query" and self.attack is not None:
                content = self.attack(kind, reply.content)
                if content is not None:
                    yield Message(content, reply_to=message)
            else:
                yield reply


def server_identity(patch: pytest.MonkeyPatch) -> None:
    """The server process's Flower identity, which ``Message`` reads when the server builds one."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        patch.setattr(TaskIdentity, name, value)


def run(tmp_path: Path, name: str, run_config: dict | None = None, model: str = "FedPAC", **grid) -> tuple:
    """Serve a run of :data:`CONFIG` (its history and server state) with the stand-in grid ``StandInGrid(**grid)``.

    ``model`` names one of the federations of ``flower_helpers.FEDERATIONS``.
    """
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(root=tmp_path / name, model=FEDERATIONS[model]))
    trainer = serve(config, StandInGrid(config, **grid), {"wait-s": 5, "max-message-mb": 1, **(run_config or {})})
    return trainer.history, trainer.server_state
