"""Atomic, self-describing federation checkpoints that load with ``weights_only=True``."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, cast

import torch

from fedhet.plugins.storage.files import atomic_torch_save, check_structure, path_under

log = logging.getLogger(__name__)

FORMAT = "fedhet-federation-checkpoint"
VERSION = 2  # 2: the state under "state", with its SHA-256 (payload_digest) under "sha256"


def payload_digest(state: Any) -> str:
    """SHA-256 of a checkpoint's content: its structure, scalars and every tensor's dtype, shape and bytes, in order.

    The same for a state and what ``torch.load`` reads back from its file, so a changed byte is detected wherever it
    falls (tensor data or structure).
    """
    digest = hashlib.sha256()

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}:".encode())
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            digest.update(f"D{len(value)}:".encode())
            for key, item in value.items():
                visit(key)
                visit(item)
        elif isinstance(value, (list, tuple)):
            digest.update(f"{type(value).__name__[0]}{len(value)}:".encode())
            for item in value:
                visit(item)
        else:
            digest.update(f"{type(value).__name__}={value!r};".encode())

    visit(state)
    return digest.hexdigest()


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: a temporary file in the same folder, flushed, then renamed.

    The file holds ``state`` with its :func:`payload_digest`: :func:`load_checkpoint` refuses a file whose content
    does not hash to it (a flipped bit, a changed value). A process killed while writing leaves the previous checkpoint
    intact; its temporary file is removed by the next write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for orphan in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed while writing
        orphan.unlink(missing_ok=True)
    atomic_torch_save({"format": FORMAT, "version": VERSION, "sha256": payload_digest(state), "state": state}, path)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, refusing truncated, corrupted or foreign files.

    Raises:
        FileNotFoundError: when ``path`` is not a file.
        ValueError: naming ``path`` when it is not a fedhet checkpoint of this format version, its content is
            nested too deep or too large to walk (:func:`~fedhet.plugins.storage.files.check_structure`), or does not
            match its checksum.

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
    return {"format": FORMAT, "version": VERSION, **state}


def resumed_logger_version(state: dict[str, Any], logs_dir: str | Path, source: str | Path | None) -> int | str | None:
    """The CSV logger version a resumed run writes to, refused unless it names a folder inside ``logs_dir``.

    A checkpoint is untrusted input: a version such as ``"../../elsewhere"`` would make the logger write (and
    overwrite) ``metrics.csv`` and ``hparams.yaml`` outside the run.

    Raises:
        ValueError: naming ``source`` and the field ``logger_versions`` when the version is not an ``int`` or a
            relative folder inside ``logs_dir``.

    """
    versions = state.get("logger_versions") or []
    if not isinstance(versions, list):
        raise ValueError(f"checkpoint {str(source)!r}: field 'logger_versions' must be a list, got {versions!r}")
    version = versions[0] if versions else None
    if version is None or (isinstance(version, int) and not isinstance(version, bool) and version >= 0):
        return version
    path_under(logs_dir, version, "logger_versions", f"checkpoint {str(source)!r}")
    return cast(str, version)  # path_under refuses all but a str


def check_resumed_rounds(state: dict[str, Any], rounds: int, sampler: Any, source: str | Path) -> None:
    """Say what resuming ``state`` with ``rounds`` rounds will do when it is not simply "run the rounds left".

    - fewer ``rounds`` than the checkpoint has done: refused (nothing would run and the history would not match);
    - as many: a warning that there is nothing to train;
    - more rounds than the finished run the checkpoint ends had, with ``sampler.full_last_round``: a warning that the
      result differs from a run started with ``rounds``, since that run's last round took every client.

    Raises:
        ValueError: naming ``source`` and the field ``rounds`` when ``rounds`` is below the rounds done.

    """
    done = int(state["round"])
    if rounds < done:
        raise ValueError(
            f"checkpoint {str(source)!r} has {done} rounds done, but field 'rounds' is {rounds}: nothing would be"
            f" trained; set rounds above {done} to train more, or evaluate it with `fedhet test --ckpt_path`"
        )
    if rounds == done:
        log.warning("checkpoint %r has all %d rounds done: nothing to train (set 'rounds' higher to train more)",
                    str(source), done)  # fmt: skip
    planned = state.get("rounds")
    if getattr(sampler, "full_last_round", False) and planned is not None and done == planned < rounds:
        log.warning(
            "checkpoint %r ends a finished run of %d rounds whose last round (round %d) took every client"
            " (full_last_round); extended to %d rounds it is not identical to a run started with rounds=%d, whose"
            " round %d samples clients",
            str(source), planned, planned - 1, rounds, rounds, planned - 1,
        )  # fmt: skip


def check_checkpoint_matches(
    state: dict[str, Any],
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
    if private is not None and (state.get("privacy") is None) == private:
        raise ValueError(
            f"checkpoint {str(source)!r} was written {'without' if private else 'with'} field 'privacy';"
            " a run cannot switch differential privacy on or off when it resumes"
        )
    if state["client_ids"] != client_ids:
        missing = sorted(set(state["client_ids"]) - set(client_ids))
        extra = sorted(set(client_ids) - set(state["client_ids"]))
        raise ValueError(
            f"checkpoint {str(source)!r} was written for other clients (missing here: {missing}, new here: {extra})"
        )
    if state["seed"] != seed:
        raise ValueError(f"checkpoint {str(source)!r} was written with seed {state['seed']}, field 'seed' is {seed}")
    if differences:
        raise ValueError(f"checkpoint {str(source)!r} was written by another run: " + "; ".join(differences))
