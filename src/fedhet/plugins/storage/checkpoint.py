"""Atomic, self-describing federation checkpoints that load with ``weights_only=True``.

The content of a checkpoint is one typed record, :class:`FederationCheckpoint`, written by :func:`save_checkpoint` and
read back, checked field by field, by :func:`load_checkpoint`: the trainer (fit, resume, validate, test, export), a
suite's resume and FedDaDiL's step-1 encoder read its fields by name, never the file's dictionary keys.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast

import torch

from fedhet.plugins.storage.files import atomic_torch_save, check_structure, path_under

log = logging.getLogger(__name__)

FORMAT = "fedhet-federation-checkpoint"
VERSION = 2  # 2: the state under "state", with its SHA-256 (payload_digest) under "sha256"
_SCALARS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class FederationCheckpoint:
    """What a federation checkpoint holds.

    Attributes:
        round: the rounds done.
        rounds: the rounds the run that wrote it was set to train (``None`` in checkpoints that did not say).
        seed: the trainer's seed.
        client_ids: the federation's clients, in order.
        server: the server state (:meth:`~fedhet.core.ServerState.state_dict`: ``shared``, ``statistics``,
            ``per_client``).
        clients: ``client id -> ClientState.state_dict()`` of every client.
        callbacks: the stateful callbacks' states, by their keys.
        history: the round metrics so far, one mapping per round.
        comm_totals: the bytes sent up and down so far.
        privacy: the privacy accountant's state (``None`` without differential privacy).
        logger_versions: the version of each logger (the CSV logger's is the run's version folder).
        fingerprint: what the run is (:func:`~fedhet.plugins.storage.fingerprint.run_fingerprint`).

    """

    round: int
    rounds: int | None
    seed: int
    client_ids: list[str]
    server: dict[str, Any]
    clients: dict[str, Any]
    callbacks: dict[str, Any]
    history: list[dict[str, Any]]
    comm_totals: dict[str, Any]
    privacy: dict[str, Any] | None
    logger_versions: list[Any]
    fingerprint: dict[str, Any]

    def to_state(self) -> dict[str, Any]:
        """The plain dictionary the file holds (tensors and plain values only)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], source: str | Path) -> FederationCheckpoint:
        """Read a checkpoint's dictionary, refusing a missing or mistyped field in one line naming ``source``.

        Raises:
            ValueError: naming ``source`` and the field.

        """
        kinds: dict[str, tuple[type, ...]] = {
            "round": (int,),
            "seed": (int,),
            "client_ids": (list,),
            "server": (dict,),
            "clients": (dict,),
            "callbacks": (dict,),
            "history": (list,),
            "comm_totals": (dict,),
            "fingerprint": (dict,),
        }
        where = f"checkpoint {str(source)!r}"
        for name, kind in kinds.items():
            value = state.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(
                    f"{where}: field {name!r} must be of type {kind[0].__name__}, got {type(value).__name__}"
                )
        if not all(isinstance(cid, str) for cid in state["client_ids"]):
            raise ValueError(f"{where}: field 'client_ids' must hold strings")
        versions = state.get("logger_versions", [])
        if not isinstance(versions, list):
            raise ValueError(f"{where}: field 'logger_versions' must be a list, got {versions!r}")
        rounds = state.get("rounds")
        if rounds is not None and (not isinstance(rounds, int) or isinstance(rounds, bool)):
            raise ValueError(f"{where}: field 'rounds' must be of type int, got {rounds!r}")
        privacy = state.get("privacy")
        if privacy is not None and not isinstance(privacy, dict):
            raise ValueError(f"{where}: field 'privacy' must be of type dict, got {type(privacy).__name__}")
        known = {name: state[name] for name in kinds}
        return cls(**known, rounds=rounds, privacy=privacy, logger_versions=versions)


def payload_digest(state: Any) -> str:
    """SHA-256 of a checkpoint's content: its structure, scalars and every tensor's dtype, shape and bytes, in order.

    The same for a state and what ``torch.load`` reads back from its file, so a changed byte is detected wherever it
    falls (tensor data or structure).
    """
    digest = hashlib.sha256()
    chunks: list[bytes] = []  # small pieces, hashed together (the digest of a concatenation is that of its pieces)

    def visit(value: Any) -> None:
        kind = type(value)
        if kind in _SCALARS:  # most of a checkpoint's objects (its history's keys and values): checked first
            chunks.append(f"{kind.__name__}={value!r};".encode())
        elif isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            chunks.append(f"T{tensor.dtype}{tuple(tensor.shape)}:".encode())
            digest.update(b"".join(chunks))
            chunks.clear()
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())  # a large tensor is not copied twice
        elif isinstance(value, dict):
            chunks.append(f"D{len(value)}:".encode())
            for key, item in value.items():
                if type(key) in _SCALARS and type(item) in _SCALARS:  # a history row's metric: no call per part
                    chunks.append(f"{type(key).__name__}={key!r};{type(item).__name__}={item!r};".encode())
                else:
                    visit(key)
                    visit(item)
        elif isinstance(value, (list, tuple)):
            chunks.append(f"{type(value).__name__[0]}{len(value)}:".encode())
            for item in value:
                visit(item)
        else:
            chunks.append(f"{type(value).__name__}={value!r};".encode())

    visit(state)
    digest.update(b"".join(chunks))
    return digest.hexdigest()


def save_checkpoint(path: str | Path, checkpoint: FederationCheckpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically: a temporary file in the same folder, flushed, then renamed.

    The file holds its content (:meth:`FederationCheckpoint.to_state`) with its :func:`payload_digest`:
    :func:`load_checkpoint` refuses a file whose content does not hash to it (a flipped bit, a changed value). A
    process killed while writing leaves the previous checkpoint intact; its temporary file is removed by the next
    write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for orphan in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed while writing
        orphan.unlink(missing_ok=True)
    state = checkpoint.to_state()
    atomic_torch_save({"format": FORMAT, "version": VERSION, "sha256": payload_digest(state), "state": state}, path)


def load_checkpoint(path: str | Path) -> FederationCheckpoint:
    """Read a checkpoint written by :func:`save_checkpoint`, refusing truncated, corrupted or foreign files.

    Raises:
        FileNotFoundError: when ``path`` is not a file.
        ValueError: naming ``path`` when it is not a fedhet checkpoint of this format version, its content is
            nested too deep or too large to walk (:func:`~fedhet.plugins.storage.files.check_structure`), or does not
            match its checksum, or a field is missing or of the wrong type (:meth:`FederationCheckpoint.from_state`).

    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"checkpoint {str(path)!r} could not be read (truncated or not a torch file): {err}") from err
    check_structure(saved, f"checkpoint {str(path)!r}")
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ValueError(f"checkpoint {str(path)!r} is not a fedhet federation checkpoint")
    if saved.get("version") != VERSION:
        raise ValueError(f"checkpoint {str(path)!r} has format version {saved.get('version')}, expected {VERSION}")
    state = saved.get("state")
    if not isinstance(state, dict) or payload_digest(state) != saved.get("sha256"):
        raise ValueError(
            f"checkpoint {str(path)!r} is corrupted: its content does not match its SHA-256 checksum (a changed or"
            " damaged file); resume from an intact copy"
        )
    return FederationCheckpoint.from_state(state, path)


def resumed_logger_version(
    state: FederationCheckpoint, logs_dir: str | Path, source: str | Path | None
) -> int | str | None:
    """The CSV logger version a resumed run writes to, refused unless it names a folder inside ``logs_dir``.

    A checkpoint is untrusted input: a version such as ``"../../elsewhere"`` would make the logger write (and
    overwrite) ``metrics.csv`` and ``hparams.yaml`` outside the run.

    Raises:
        ValueError: naming ``source`` and the field ``logger_versions`` when the version is not an ``int`` or a
            relative folder inside ``logs_dir``.

    """
    versions = state.logger_versions
    version = versions[0] if versions else None
    if version is None or (isinstance(version, int) and not isinstance(version, bool) and version >= 0):
        return version
    path_under(logs_dir, version, "logger_versions", f"checkpoint {str(source)!r}")
    return cast(str, version)  # path_under refuses all but a str


def check_resumed_rounds(state: FederationCheckpoint, rounds: int, sampler: Any, source: str | Path) -> None:
    """Say what resuming ``state`` with ``rounds`` rounds will do when it is not simply "run the rounds left".

    - fewer ``rounds`` than the checkpoint has done: refused (nothing would run and the history would not match);
    - as many: a warning that there is nothing to train;
    - more rounds than the finished run the checkpoint ends had, with ``sampler.full_last_round``: a warning that the
      result differs from a run started with ``rounds``, since that run's last round took every client.

    Raises:
        ValueError: naming ``source`` and the field ``rounds`` when ``rounds`` is below the rounds done.

    """
    done = state.round
    if rounds < done:
        raise ValueError(
            f"checkpoint {str(source)!r} has {done} rounds done, but field 'rounds' is {rounds}: nothing would be"
            f" trained; set rounds above {done} to train more, or evaluate it with `fedhet test --ckpt_path`"
        )
    if rounds == done:
        log.warning("checkpoint %r has all %d rounds done: nothing to train (set 'rounds' higher to train more)",
                    str(source), done)  # fmt: skip
    planned = state.rounds
    if getattr(sampler, "full_last_round", False) and planned is not None and done == planned < rounds:
        log.warning(
            "checkpoint %r ends a finished run of %d rounds whose last round (round %d) took every client"
            " (full_last_round); extended to %d rounds it is not identical to a run started with rounds=%d, whose"
            " round %d samples clients",
            str(source), planned, planned - 1, rounds, rounds, planned - 1,
        )  # fmt: skip


def check_checkpoint_matches(
    state: FederationCheckpoint,
    source: str | Path,
    client_ids: list[str],
    seed: int,
    differences: list[str],
    private: bool | None = None,
) -> None:
    """Refuse a checkpoint written by another run, in one message naming ``source`` and what differs.

    Args:
        state: the checkpoint's content (:func:`load_checkpoint`).
        source: where it was read from, for the message.
        client_ids: this run's clients, in order.
        seed: this run's seed.
        differences: what differs between the checkpoint's fingerprint and this run's
            (:func:`~fedhet.plugins.storage.fingerprint.fingerprint_differences`).
        private: whether this run uses differential privacy (``None``: not checked, e.g. when only evaluating).

    Raises:
        ValueError: naming ``source`` and the field that differs (clients, ``seed``, ``privacy``, the fingerprint).

    """
    if private is not None and (state.privacy is None) == private:
        raise ValueError(
            f"checkpoint {str(source)!r} was written {'without' if private else 'with'} field 'privacy';"
            " a run cannot switch differential privacy on or off when it resumes"
        )
    if state.client_ids != client_ids:
        missing = sorted(set(state.client_ids) - set(client_ids))
        extra = sorted(set(client_ids) - set(state.client_ids))
        raise ValueError(
            f"checkpoint {str(source)!r} was written for other clients (missing here: {missing}, new here: {extra})"
        )
    if state.seed != seed:
        raise ValueError(f"checkpoint {str(source)!r} was written with seed {state.seed}, field 'seed' is {seed}")
    if differences:
        raise ValueError(f"checkpoint {str(source)!r} was written by another run: " + "; ".join(differences))
