"""A tuning journal file checked before a study opens it: a killed writer's partial last record is repaired.

Optuna's journal file (:class:`optuna.storages.journal.JournalFileBackend`) holds one JSON record per line, appended
under a lock. A process killed while appending leaves a last line without its newline. Optuna's reader skips such a
line, but the next append writes right after it, and the joined line is then unreadable for good: every later read of
the study ends in a ``JSONDecodeError``. :func:`repair_journal` runs before a study is opened, under the journal's own
lock (no append is under way): it completes a last record that is whole but lacks its newline, drops one that is cut
short, and refuses a file damaged elsewhere, naming the file and the line.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from optuna.storages.journal import JournalFileSymlinkLock

log = logging.getLogger(__name__)


class JournalDamagedError(RuntimeError):
    """A journal file with an unreadable record before its last line: one line naming the file and the line."""


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False


def repair_journal(path: str | os.PathLike[str]) -> str | None:
    r"""Check the journal file ``path`` and repair a partial last record, under the journal's lock.

    Args:
        path: the journal file; a missing or empty file is left as it is.

    Returns:
        the line said about a repair (also logged as a warning), or ``None`` when the file was whole.

    Raises:
        JournalDamagedError: when a line other than the last is not a JSON record (a partial record that a later
            append joined); the message names the file and the line, and says what to do.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     journal = Path(folder, "study.log")
        ...     _ = journal.write_bytes(b'{"op_code": 0}\n{"op_code": 4, "trial_')
        ...     said = repair_journal(journal)
        ...     journal.read_bytes()
        b'{"op_code": 0}\n'

    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    lock = JournalFileSymlinkLock(str(path))  # the lock Optuna's appends take (JournalFileBackend's default)
    lock.acquire()
    try:
        return _repair(path)
    finally:
        lock.release()


def _repair(path: Path) -> str | None:
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: empty in a whole file
    for number, line in enumerate(lines, start=1):
        if not _is_record(line):
            raise JournalDamagedError(
                f"tuning: journal '{path}' line {number} is not a JSON record (a process killed while writing it,"
                " then another record appended); delete that line, or the file to tune again from the start"
            )
    if not tail:
        return None
    with path.open("r+b") as journal:
        if _is_record(tail):
            journal.seek(len(data))
            journal.write(b"\n")
            said = f"tuning: journal '{path}': its last record lacked its newline (a killed writer's); completed it"
        else:
            journal.truncate(len(data) - len(tail))
            said = f"tuning: journal '{path}': dropped a partial last record of {len(tail)} bytes (a killed writer's)"
        journal.flush()
        os.fsync(journal.fileno())
    log.warning(said)
    return said
