"""The loopback federation of ``docs/deployment.md`` ("Try it on one machine"), started from the doc's own commands.

The doc's recipe is the one source of truth: its ``bash`` blocks (between the ``loopback recipe`` markers) are run
in order, with free ports in ``LINK_PORT``/``NODE_PORT`` and a private ``FLWR_HOME``. Between blocks this waits for
readiness (ports that accept connections, the processes' log lines), each wait with a deadline, instead of sleeping.
Used by ``tests/integrations/test_flower_deployment.py`` and ``benchmarks/flower_deployment.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deployment.md"
APP = ROOT / "examples" / "flower_app"
NODES = 3
WARM_READY = "claiming the tasks"  # fedhet.integrations.flower.node's log line once its imports are done
NODE_READY = "SuperNode ID"  # a SuperNode's log line once the SuperLink registered it


def recipe(doc: Path = DOC) -> list[str]:
    """The ``bash`` blocks of the doc's loopback recipe, in order: set-up, SuperLink, SuperNodes, ``flwr run``."""
    text = doc.read_text()
    section = text[text.index("<!-- loopback recipe") : text.index("<!-- /loopback recipe -->")]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 4, f"{doc}: the loopback recipe has {len(blocks)} bash blocks, not 4"
    return blocks


def cold(nodes_block: str) -> str:
    """The SuperNodes' block in Flower's default isolation: a ``flwr-clientapp`` process per message, no warm one."""
    lines = [line for line in nodes_block.splitlines() if "fedhet.integrations.flower.node" not in line]
    return "\n".join(lines).replace("--isolation process", "--isolation subprocess") + "\n"


def free_port_range(count: int) -> int:
    """A port ``p`` of 127.0.0.1 such that ``p`` to ``p + count - 1`` are free now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count < 65536 and all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Loopback:
    """A SuperLink and three SuperNodes on 127.0.0.1, started by the doc's recipe; stopped on exit.

    The SuperLink starts in ``home / "server"``: what the ServerApp writes under a relative ``default_root_dir`` (the
    shipped example's ``fedhet_runs/...``) lands there, not in the repository; everything else runs from the
    repository's root, as the doc says.

    Args:
        home: the ``FLWR_HOME`` (Flower's config, apps and state) and the processes' logs.
        warm: the recipe as written (one warm ClientApp process per SuperNode); ``False``: :func:`cold`.
        deadline_s: the most seconds each readiness wait may take.

    """

    def __init__(self, home: Path, warm: bool = True, deadline_s: float = 300.0) -> None:
        self.home = home
        self.warm = warm
        self.deadline_s = deadline_s
        self.link_port = free_port_range(1)
        self.node_port = free_port_range(NODES)
        self.env = {
            **os.environ,
            "FLWR_HOME": str(home),
            "LINK_PORT": str(self.link_port),
            "NODE_PORT": str(self.node_port),
            "OMP_NUM_THREADS": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.server_dir = home / "server"
        self.groups: list[subprocess.Popen] = []
        self.setup, self.link, self.nodes, self.run_block = recipe()
        if not warm:
            self.nodes = cold(self.nodes)

    def __enter__(self) -> Loopback:
        self.home.mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", "-euc", self.setup], env=self.env, cwd=ROOT, check=True, timeout=60)
        self.server_dir.mkdir(exist_ok=True)
        try:
            link = self._start("superlink", self.link, cwd=self.server_dir)
            self._wait(lambda: _listens(self.link_port), link, f"the SuperLink on port {self.link_port}")
            nodes = self._start("nodes", self.nodes)
            ports = [self.node_port + i for i in range(NODES)]
            self._wait(lambda: all(_listens(p) for p in ports), nodes, f"the SuperNodes on ports {ports}")
            self._wait(lambda: self.log("nodes").count(NODE_READY) >= NODES, nodes, "the SuperNodes' registration")
            if self.warm:
                self._wait(lambda: self.log("nodes").count(WARM_READY) >= NODES, nodes, "the warm ClientApp processes")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self, name: str) -> str:
        """What the processes of a block (``"superlink"``, ``"nodes"``) logged so far."""
        return (self.home / f"{name}.log").read_text(errors="replace")

    def run(self, app: Path, run_config: str, timeout_s: float = 1500) -> tuple[float, subprocess.CompletedProcess]:
        """The doc's ``flwr run`` of ``app`` (in place of ``examples/flower_app``) with ``--run-config run_config``.

        Returns:
            ``(wall seconds, the finished command)``.

        """
        command = self.run_block.strip().replace("examples/flower_app", shlex.quote(str(app)))
        command += f" --run-config {shlex.quote(run_config)}"
        started = time.perf_counter()
        done = subprocess.run(
            ["bash", "-euc", command], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
        )
        return time.perf_counter() - started, done

    def _start(self, name: str, block: str, cwd: Path = ROOT) -> subprocess.Popen:
        """Run a block that starts background processes, in its own process group (stopped together)."""
        out = (self.home / f"{name}.log").open("w")
        group = subprocess.Popen(
            ["bash", "-euc", f"{block}\nwait"], env=self.env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.groups.append(group)
        return group

    def _wait(self, ready, group: subprocess.Popen, what: str) -> None:
        deadline = time.monotonic() + self.deadline_s
        while not ready():
            if group.poll() is not None:
                raise RuntimeError(f"{what}: its processes exited ({group.returncode}); see {self.home}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not ready within {self.deadline_s} s; see {self.home}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every process the recipe started (SuperNodes first), each group by its id."""
        for group in reversed(self.groups):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group.pid, signal.SIGTERM)
        for group in self.groups:
            try:
                group.wait(timeout=20)
            except subprocess.TimeoutExpired:
                group.kill()
                group.wait()
            with contextlib.suppress(ProcessLookupError):  # what outlived its block's shell (told to stop)
                os.killpg(group.pid, signal.SIGKILL)
        self.groups.clear()
