"""Starting a run's processes: forked where it is safe (the reasons it is not), else the command run again."""

import os
import signal
import threading
import time

import pytest
from lightning.fabric import Fabric

from fedhet.plugins import FederatedTrainer, Processes
from fedhet.plugins.processes import launcher
from fedhet.plugins.processes.launcher import ForkedProcess, ForkLauncher, fork_refusal, use_start_method

fork_only = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"), reason="Linux only")


def two_processes() -> Fabric:
    return Fabric(accelerator="cpu", strategy="ddp", devices=2)


@pytest.fixture
def no_other_thread(monkeypatch):
    """No test left a Python thread (e.g. a W&B logger's) in this process."""
    monkeypatch.setattr(launcher, "other_python_threads", lambda: [])


@fork_only
def test_a_cpu_run_without_other_python_threads_and_one_compute_thread_each_forks(no_other_thread):
    fabric = two_processes()
    assert fork_refusal(fabric, threads=1) is None
    assert use_start_method(fabric, "auto", threads=1) == "fork"
    assert type(fabric.strategy.launcher) is ForkLauncher
    assert fabric.strategy.launcher.num_processes == 2


@fork_only
def test_another_python_thread_is_a_reason_not_to_fork():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="busy-logger")
    thread.start()
    try:
        fabric = two_processes()
        assert "busy-logger" in fork_refusal(fabric, threads=1)
        assert use_start_method(fabric, "auto", threads=1) == "popen"  # auto falls back to running the command again
        assert type(fabric.strategy.launcher) is not ForkLauncher
        with pytest.raises(ValueError, match="field 'start_method' is 'fork', but other Python threads run"):
            use_start_method(fabric, "fork", threads=1)
    finally:
        stop.set()
        thread.join()


@fork_only
def test_openmp_threads_and_several_compute_threads_per_process_are_a_reason_not_to_fork(monkeypatch, no_other_thread):
    real_listdir = os.listdir
    monkeypatch.setattr(
        launcher.os, "listdir", lambda path: ["1", "2", "3"] if path == "/proc/self/task" else real_listdir(path)
    )
    assert "could hang in its first parallel region" in fork_refusal(two_processes(), threads=4)
    assert fork_refusal(two_processes(), threads=1) is None  # one compute thread per child: safe
    monkeypatch.setattr(launcher.os, "listdir", lambda path: ["1"] if path == "/proc/self/task" else real_listdir(path))
    assert fork_refusal(two_processes(), threads=4) is None  # no OpenMP pool to inherit: any thread count is safe


def test_one_process_and_popen_keep_lightnings_launcher():
    one = Fabric(accelerator="cpu", devices=1)
    assert use_start_method(one, "fork", threads=1) == "popen"
    fabric = two_processes()
    assert use_start_method(fabric, "popen", threads=1) == "popen"
    assert type(fabric.strategy.launcher) is not ForkLauncher


def test_an_unknown_start_method_is_refused_by_name():
    with pytest.raises(ValueError, match="field 'start_method' must be 'auto', 'fork' or 'popen'"):
        FederatedTrainer(processes=Processes(start_method="spawn"))


@fork_only
@pytest.mark.parametrize(("exit_how", "expected"), [("status", 3), ("signal", -signal.SIGKILL)])
def test_a_forked_process_reports_its_exit_like_popen(exit_how, expected):
    pid = os.fork()
    if pid == 0:  # the child
        if exit_how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    child = ForkedProcess(pid)
    deadline = time.monotonic() + 10
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.returncode == expected
    child.send_signal(signal.SIGTERM)  # an ended child is left alone
