"""Helpers run in warm children by test_warm.py: a callback that kills its process after a round, a sleeper."""

import os
import signal
import time

from fedhet.callbacks.base import FederatedCallback


class KillAfterRound(FederatedCallback):
    """Kill this process at the end of round ``round_idx`` (before that round's checkpoint is written)."""

    def __init__(self, round_idx: int = 1) -> None:
        self.round_idx = round_idx

    def on_round_end(self, trainer: object, round_idx: int, metrics: dict[str, float]) -> None:
        if round_idx == self.round_idx:
            os.kill(os.getpid(), signal.SIGKILL)


def sleep_forever(pid_file: str) -> None:
    """Write this process's pid to ``pid_file``, then sleep until killed."""
    with open(pid_file, "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        time.sleep(1)


def threads_and_variable() -> tuple[int, str, str]:
    """This process's torch threads, ``OMP_NUM_THREADS`` and ``FEDHET_WARM_TEST``."""
    import torch

    return torch.get_num_threads(), os.environ["OMP_NUM_THREADS"], os.environ["FEDHET_WARM_TEST"]
