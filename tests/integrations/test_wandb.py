"""Runs logged to Weights & Biases (offline), checked by reading back the run file that wandb wrote."""

import csv
import ipaddress
import json
import socket
import struct
import sys
import time
import zlib
from pathlib import Path

import pytest

wandb = pytest.importorskip("wandb")
from lightning.pytorch.loggers import WandbLogger  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

from fedhet.cli import FederatedCLI  # noqa: E402
from fedhet.modules import FedAvg  # noqa: E402
from fedhet.plugins import FederatedTrainer  # noqa: E402
from fedhet.plugins.rounds.options import Processes, Reporting  # noqa: E402
from fedhet.plugins.storage.run_folder import RunCSVLogger  # noqa: E402
from tests.test_cli import FEDAVG, tiny  # noqa: E402

# ------------------------------------------------------------------------------------------ reading a .wandb file
# A .wandb file is a LevelDB-style log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of
# chunks, each with a 7-byte header (CRC-32 of type byte + data, length, type: 1 full, 2 first, 3 middle, 4 last)
# that never straddles a block boundary. Each assembled record is a serialised wandb_internal_pb2.Record.
_BLOCK = 32 * 1024
_HEADER = struct.Struct("<4sHB")
_CHUNK = struct.Struct("<IHB")


def read_records(path):
    data = Path(path).read_bytes()
    ident, magic, version = _HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"not a wandb run file: {path}"
    records, pending, pos = [], None, _HEADER.size
    while pos + _CHUNK.size <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK.size:  # block trailer padding
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        if crc == length == kind == 0:  # zero padding at the end of the file
            break
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        assert len(chunk) == length, "truncated record"
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad checksum at byte {pos}"
        pos += _CHUNK.size + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
            pending = None
        else:
            raise AssertionError(f"unknown chunk type {kind}")
    parsed = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


def _items(items):
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def history(records):
    return [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]


def config(records):
    merged = {}
    for record in records:
        if record.WhichOneof("record_type") == "config":
            merged.update(_items(record.config.update))
    return merged


def finished_run_records(save_dir, timeout=60.0):
    """The records of the one offline run under ``save_dir``, once wandb has written its exit record."""
    (run_dir,) = Path(save_dir, "wandb").glob("offline-run-*")
    return finished_records(run_dir, timeout)


def finished_records(run_dir, timeout=60.0):
    """The records of the offline run in ``run_dir`` (an ``offline-run-*`` folder), once its exit record is written.

    ``wandb.finish()`` returns before wandb-core has flushed an offline run file, so wait for it.
    """
    deadline = time.monotonic() + timeout
    while True:
        paths = list(Path(run_dir).glob("run-*.wandb"))
        try:
            records = read_records(paths[0]) if len(paths) == 1 else []
        except (AssertionError, struct.error):  # caught mid-write
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"no finished wandb run file in {run_dir} after {timeout} s: {paths}")
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------ fixtures
def _is_local(address):
    if not isinstance(address, tuple):  # AF_UNIX path
        return True
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb offline, writing only under tmp_path, with any connection to a non-local address refused."""
    save_dir = tmp_path / "wandb_save"
    save_dir.mkdir()
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    monkeypatch.setenv("WANDB_DIR", str(save_dir))
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setattr(sys, "argv", ["fedhet"])

    attempts = []
    real_connect = socket.socket.connect

    def guarded_connect(sock, address):
        if not _is_local(address):
            attempts.append(address)
            raise OSError(f"test_wandb: network access to {address} refused")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    yield save_dir
    if wandb.run is not None:
        wandb.finish()
    assert not attempts, f"wandb tried to reach the network: {attempts}"


def check_rounds(rows, trainer_history):
    """Every round was logged once, at step = round index, with the values the trainer recorded."""
    assert [row["trainer/global_step"] for row in rows] == list(range(len(trainer_history)))
    assert [row["round"] for row in rows] == [m["round"] for m in trainer_history]
    assert [row["_step"] for row in rows] == list(range(len(trainer_history)))
    for row, metrics in zip(rows, trainer_history, strict=True):
        for key in ("val/acc_mean", "val/acc_weighted", "val/acc_worst", "train/loss_mean", "comm/bytes_up"):
            assert row[key] == metrics[key], key
    assert rows[-1]["val/acc_mean"] == trainer_history[-1]["val/acc_mean"]


# ------------------------------------------------------------------------------------------ tests
def test_wandb_logger_gets_every_round(offline_wandb, tmp_path, tiny_federation):
    logger = WandbLogger(save_dir=str(offline_wandb), offline=True, project="fedhet-test")
    trainer = FederatedTrainer(
        rounds=2,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        default_root_dir=str(tmp_path / "run"),
        logger=logger,
    )
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert logger.experiment.offline
    wandb.finish()

    records = finished_run_records(offline_wandb)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "fedhet-test"
    rows = history(records)
    assert len(rows) == 2
    check_rounds(rows, trainer.history)
    logged = config(records)
    assert logged["model"]["init_args"]["hidden_dims"] == [8]
    assert logged["model"]["init_args"]["finetune_epochs"] == 0
    (record,) = (tmp_path / "run").glob("version_*/metrics.csv")  # the run's CSV record is kept beside W&B
    with record.open(newline="") as handle:
        rounds = [float(row["round"]) for row in csv.DictReader(handle) if row.get("round")]
    assert rounds == [0.0, 1.0]


def test_wandb_logger_from_the_cli(offline_wandb, tmp_path):
    run_dir = tmp_path / "run"
    cli = FederatedCLI(
        args=[
            "fit",
            "-c",
            FEDAVG,
            *tiny(run_dir, rounds=2),
            "--trainer.logger.class_path",
            "lightning.pytorch.loggers.WandbLogger",
            "--trainer.logger.init_args.offline",
            "true",
            "--trainer.logger.init_args.save_dir",
            str(offline_wandb),
            "--trainer.logger.init_args.project",
            "fedhet-test",
        ]
    )
    logger, record = cli.trainer.loggers  # the user's logger, then the run folder's CSV record
    assert isinstance(logger, WandbLogger)
    assert isinstance(record, RunCSVLogger)
    assert logger.experiment.offline
    wandb.finish()

    records = finished_run_records(offline_wandb)
    check_rounds(history(records), cli.trainer.history)
    logged = config(records)  # the CLI logs the whole resolved config
    assert logged["trainer"]["rounds"] == 2
    assert logged["trainer"]["logger"]["class_path"] == "lightning.pytorch.loggers.WandbLogger"
    assert logged["model"]["class_path"] == "fedhet.modules.FedAvg"
    assert logged["data"]["init_args"]["num_clients"] == 3
    assert (run_dir / "version_0" / "config.yaml").is_file()
    assert (run_dir / "version_0" / "metrics.csv").is_file()
