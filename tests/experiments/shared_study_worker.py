"""A tuner process of the shared-study test, in a module of its own so that a spawned process imports little."""

import os
import time

from fedhet.experiments.tuning import SearchSpace, tune

N_TRIALS = 8


def run(storage, folder, barrier, seed):
    """Tune ``x`` on the shared ``storage`` once both processes are ready; mark each trial run in ``folder``."""
    space = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "worker")
    barrier.wait()

    def objective(overrides, handle):
        with open(os.path.join(folder, f"trial_{handle.number}"), "x") as marker:  # "x": a trial run twice fails
            marker.write(str(os.getpid()))
        time.sleep(0.2)
        return -((overrides["x"] - 0.3) ** 2)

    tune("shared", space, objective, n_trials=N_TRIALS, storage=storage, seed=seed)
