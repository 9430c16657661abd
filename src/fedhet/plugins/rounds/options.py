"""The option groups of :class:`~fedhet.plugins.FederatedTrainer`: one frozen dataclass per concern.

Each group checks its own fields when it is built, so a value the trainer cannot run with is refused before anything
starts, in one sentence naming the group and the field. In a config file a group is a nested section and on the
command line a dotted option (``--trainer.processes.devices 2``); ``fedhet fit --help`` lists each group under its
own heading. :func:`check_run_length` checks the trainer's own counts the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedhet.plugins.processes.launcher import StartMethod


def _refuse(group: str, field: str, requirement: str, value: object) -> ValueError:
    """The error for ``group.field`` out of range: ``FederatedTrainer: <group>: field '<field>' must ...``."""
    return ValueError(f"FederatedTrainer: {group}: field '{field}' must {requirement}, got {value!r}")


def check_run_length(rounds: int, local_epochs: int, local_steps: int | None) -> None:
    """Refuse, naming the field, a trainer's ``rounds``, ``local_epochs`` or ``local_steps`` (when set) below 1."""
    for name, value in (("rounds", rounds), ("local_epochs", local_epochs), ("local_steps", local_steps)):
        if value is not None and value < 1:
            raise ValueError(f"FederatedTrainer: field '{name}' must be at least 1, got {value}")


@dataclass(frozen=True)
class Processes:
    """Where and in how many processes the clients train.

    Args:
        accelerator: Fabric accelerator (``"cpu"``, ``"gpu"``, ``"auto"``...).
        strategy: Fabric strategy used to launch processes and gather uploads (``"auto"``, ``"ddp"``); client
            modules are never wrapped for gradient synchronisation.
        devices: processes (CPU) or GPUs that share the clients.
        num_nodes: machines, for multi-node runs launched by ``fabric run``, torchrun or SLURM.
        start_method: how ``fit`` starts the other processes of this machine (:mod:`fedhet.plugins.processes.launcher`):
            ``"fork"`` forks them from this one (no second interpreter start-up, imports, config or data; refused
            with the reason where it is not safe: CPU runs on Linux, no other thread, or one compute thread per
            process), ``"popen"`` runs the command again for each (Lightning's launcher), ``"auto"`` forks when that
            is safe, else runs the command again.
        precision: Fabric precision (``"32-true"``, ``"bf16-mixed"``...).
        stack_clients: shorthand for ``runner=StackedRunner(stack_clients)``: train the clients of a process in
            stacks of up to this many at once with ``torch.func`` (:mod:`fedhet.plugins.clients.stacked`). ``None``: the
            trainer's ``runner`` (one client at a time by default).
        retain_cpu_heap: on a CPU run with glibc, keep freed memory in each process's heap for reuse
            (:func:`~fedhet.plugins.processes.heap.retain_freed_memory`, process-wide, from the start of ``fit``): a
            step's large tensors then reuse pages instead of faulting in new ones (15% of a CNN round's time on a CPU in
            one fresh fit). The process keeps up to 128 MiB of freed memory it would have returned.
        threads: compute threads of each process (torch's intra-op threads and NumPy's BLAS,
            :func:`~fedhet.plugins.processes.threads.pin_threads`), set when the command starts and recorded in
            ``config.yaml``. A float32 sum split over threads depends on their number, so a fixed number (not the
            machine's cores) gives the same results on every machine with the same kernels, whatever else runs there;
            raise it for speed on large models, knowing results then differ from a run on another number of threads.

    """

    accelerator: str = "auto"
    strategy: str = "auto"
    devices: int | str = 1
    num_nodes: int = 1
    start_method: StartMethod = "auto"
    precision: str | None = None
    stack_clients: int | None = None
    retain_cpu_heap: bool = True
    threads: int = 1

    def __post_init__(self) -> None:
        if self.start_method not in ("auto", "fork", "popen"):
            raise _refuse("processes", "start_method", "be 'auto', 'fork' or 'popen'", self.start_method)
        if self.stack_clients is not None and self.stack_clients < 1:
            raise _refuse("processes", "stack_clients", "be at least 1 or None", self.stack_clients)
        if self.num_nodes < 1:
            raise _refuse("processes", "num_nodes", "be at least 1", self.num_nodes)
        if self.threads < 1:
            raise _refuse("processes", "threads", "be at least 1", self.threads)


@dataclass(frozen=True)
class Checkpointing:
    """When the run saves ``version_N/checkpoints/last.ckpt`` (the whole federation, resumable with ``ckpt_path``).

    Args:
        every: save every this many rounds, and after the last round or an early stop (0: never).

    """

    every: int = 1

    def __post_init__(self) -> None:
        if self.every < 0:
            raise _refuse("checkpointing", "every", "be >= 0", self.every)

    def due(self, rounds_done: int, rounds: int, stopping: bool) -> bool:
        """Whether the run saves after ``rounds_done`` of its ``rounds`` rounds (``stopping``: it stops there)."""
        return self.every > 0 and (rounds_done % self.every == 0 or rounds_done == rounds or stopping)


@dataclass(frozen=True)
class Faults:
    """What a round survives: clients that raise, upload NaN/Inf, send what was not declared, or straggle.

    Args:
        max_client_failures: the fraction of a round's clients that may fail before the run stops; failed clients
            are left out of that round's aggregate, named in the log and counted in ``clients/failed``.
        client_time_budget_s: shorthand for a :class:`~fedhet.plugins.TimeBudget` upload check: seconds of
            wall time a client's local work (loading its state, training, building its upload) may take; a slower
            client is left out of that round's aggregate, keeps its previous state and is counted in
            ``clients/failed`` and ``clients/stragglers``. ``None``: no limit. Wall time depends on the machine, so a
            run that drops stragglers is only reproducible where the same clients straggle.

    """

    max_client_failures: float = 0.5
    client_time_budget_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_client_failures <= 1.0:
            raise _refuse("faults", "max_client_failures", "be in [0, 1]", self.max_client_failures)
        if self.client_time_budget_s is not None and not self.client_time_budget_s > 0:
            raise _refuse("faults", "client_time_budget_s", "be positive or None", self.client_time_budget_s)


@dataclass(frozen=True)
class ClientStates:
    """How clients' personal states start and where they are kept between the rounds they take part in.

    Args:
        personal_init: how clients' personal layers (heads, input layers...) start. ``"shared"`` (as the papers
            and their reference code do with one random seed and one template model): one initialisation per client
            architecture, the same draw that initialises the shared layers, and a personal tensor that the first
            architecture also has (same name, shape and dtype) starts as that one, so clients start from one head
            even where their input layers differ in size. ``"per_architecture"`` (0.2.0's development versions): each
            architecture's own draw only. ``"per_client"``: each client's personal layers drawn from its own seed
            (seed, client id).
        budget_mb: keep at most this many MiB of clients' personal state (and kept optimizer state) in memory per
            process; the least recently trained clients' states spill to a folder of this run's own,
            ``version_N/client_state/<run>-rank<r>/``, locked while the run uses it, and are read back when those
            clients next take part. ``None`` keeps every state in memory.
        keep_spilled: leave the spilled states on disk after the run (for inspection); otherwise the folder is
            deleted when the trainer is done with it. The checkpoint holds every state either way.

    """

    personal_init: Literal["shared", "per_architecture", "per_client"] = "shared"
    budget_mb: float | None = None
    keep_spilled: bool = False

    def __post_init__(self) -> None:
        if self.personal_init not in ("shared", "per_architecture", "per_client"):
            raise _refuse(
                "client_state", "personal_init", "be 'shared', 'per_architecture' or 'per_client'", self.personal_init
            )
        if self.budget_mb is not None and self.budget_mb < 0:
            raise _refuse("client_state", "budget_mb", "be >= 0", self.budget_mb)


@dataclass(frozen=True)
class Reporting:
    """What the run evaluates, logs and shows, and how often.

    Args:
        eval_every: evaluate every client on its validation split every this many rounds (and always after the
            last).
        per_client: also log each client's evaluation metrics (``val/acc/<client>``), beside the summaries.
        progress_bar: show a ``rich`` progress display (only on rank 0 and in a terminal).
        accuracy_plot: draw ``plots/accuracy.png`` at the end of training
            (:class:`~fedhet.callbacks.accuracy_curve.AccuracyCurve`, which the ``fedhet`` command adds to every run);
            a suite's runs turn it off, as the suite draws its own plots.

    """

    eval_every: int = 1
    per_client: bool = True
    progress_bar: bool = True
    accuracy_plot: bool = True

    def __post_init__(self) -> None:
        if self.eval_every < 1:
            raise _refuse("reporting", "eval_every", "be at least 1", self.eval_every)
