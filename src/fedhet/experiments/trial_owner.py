"""Who runs a tuning trial: a token naming its process, so that a trial whose process died stops counting.

The token is ``host:pid:start``, where ``start`` is the process's start time (clock ticks after boot, field 22 of
``/proc/<pid>/stat``). A process id alone is not enough: a restarted container whose entrypoint always gets the same
pid (pid 1, say) would see its dead predecessor's trials as its own, alive, and run its budget one trial short. With
the start time, a pid now held by another process names another owner. Where ``/proc`` is missing (not Linux) the
token is ``host:pid`` and only the pid is checked, as before.
"""

from __future__ import annotations

import os
import socket

import optuna
from optuna.trial import TrialState

OWNER_ATTR = "fedhet_owner"
"""The trial's user attribute holding its owner's token."""


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, from ``/proc``); ``None`` when it cannot be read.

    Args:
        pid: a process id.

    Example:
        >>> process_start(os.getpid()) == process_start(os.getpid())
        True

    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()  # after the command name, which may hold spaces
    except OSError:
        return None
    return fields[19].decode() if len(fields) > 19 else None  # field 22 of the line; 3 (the state) is fields[0]


def owner_token() -> str:
    """This process's token: ``host:pid:start`` (``host:pid`` where the start time cannot be read)."""
    pid = os.getpid()
    start = process_start(pid)
    return f"{socket.gethostname()}:{pid}" + ("" if start is None else f":{start}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def owner_alive(token: str, host: str) -> bool | None:
    """Whether the process a token names still runs; ``None`` when it cannot be told (another host, no token).

    Args:
        token: an :func:`owner_token` (``host:pid:start``, or ``host:pid`` from an older fedhet or without ``/proc``).
        host: this machine's host name (a process elsewhere cannot be checked).

    Example:
        >>> owner_alive(owner_token(), socket.gethostname())
        True

    """
    parts = token.split(":")
    if len(parts) not in (2, 3) or parts[0] != host or not parts[1].isdigit():
        return None
    pid = int(parts[1])
    if not _pid_alive(pid):
        return False
    if len(parts) == 2:
        return True
    start = process_start(pid)
    return start is None or start == parts[2]  # another start time: the pid was reused by another process


def release_dead_trials(study: optuna.Study) -> list[int]:
    """Mark failed this machine's running trials whose owner process is gone (a killed tuner's): they stop counting.

    Args:
        study: the study.

    Returns:
        the numbers of the trials released.

    """
    host = socket.gethostname()
    released = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if owner_alive(str(frozen.user_attrs.get(OWNER_ATTR, "")), host) is False:
            study.tell(frozen.number, state=TrialState.FAIL)
            released.append(frozen.number)
    return released
