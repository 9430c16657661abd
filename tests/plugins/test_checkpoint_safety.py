"""Checkpoints are untrusted input: what they hold may not write outside the run (issue 16, item 3), and a damaged
checkpoint or one of another run is refused with a message naming what differs (item 4)."""

import dataclasses
import hashlib
import re
import struct
import zipfile

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedAvg, FedRep
from fedhet.plugins.storage.checkpoint import load_checkpoint, payload_digest, save_checkpoint
from tests.conftest import make_client
from tests.plugins.test_trainer import make_trainer


def _tamper(path, **fields):
    """Rewrite a checkpoint with some fields changed, as a crafted file would be (a valid checkpoint otherwise)."""
    save_checkpoint(path, dataclasses.replace(load_checkpoint(path), **fields))


@pytest.mark.parametrize("version", ["../../victim", "<absolute>", "version_0/../../../victim", ""])
def test_a_logger_version_that_leaves_the_run_is_refused(tmp_path, tiny_federation, version):
    version = str(tmp_path / "victim") if version == "<absolute>" else version
    run = tmp_path / "runs" / "mine"
    make_trainer(run, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    ckpt = run / "version_0" / "checkpoints" / "last.ckpt"
    _tamper(ckpt, logger_versions=[version])
    with pytest.raises(ValueError, match="field 'logger_versions' holds"):
        make_trainer(run, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path=str(ckpt))
    assert not (tmp_path / "victim").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_logger_version_inside_the_run_resumes(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    _tamper(tmp_path / "version_0" / "checkpoints" / "last.ckpt", logger_versions=["renamed"])
    trainer = make_trainer(tmp_path, rounds=2)
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    # the run goes on in its checkpoint's version folder (the logger version in the checkpoint is only validated)
    assert (tmp_path / "version_0" / "metrics.csv").is_file()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"round": "3"}, "field 'round' must be of type int, got str"),
        ({"client_ids": ["a", 2]}, "field 'client_ids' must hold strings"),
        ({"server": None}, "field 'server' must be of type dict, got NoneType"),
        ({"logger_versions": "version_0"}, "field 'logger_versions' must be a list"),
    ],
)
def test_a_crafted_field_of_the_wrong_type_is_refused_in_one_line(tmp_path, tiny_federation, fields, message):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    _tamper(ckpt, **fields)  # its checksum matches: only the field's type gives it away
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert "last.ckpt" in str(refused.value)
    assert "\n" not in str(refused.value)


# ---------------------------------------------------------------- integrity and compatibility (issue 16, item 4)
def _flip_a_byte_in_the_largest_record(path):
    """Flip one bit in the middle of the largest tensor's data in a torch zip file."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.file_size // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_refused(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    _flip_a_byte_in_the_largest_record(ckpt)
    with pytest.raises(ValueError, match="corrupted: its content does not match its SHA-256"):
        load_checkpoint(ckpt)
    with pytest.raises(ValueError, match="corrupted"):
        make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")


@pytest.mark.parametrize(
    ("resumed", "named"),
    [
        (
            lambda: FedAvg(hidden_dims=[8]),
            "module class fedhet.modules.baselines.FedRep (checkpoint) vs fedhet.modules.baselines.FedAvg (this run)",
        ),
        (lambda: FedRep(hidden_dims=[16]), "hyperparameter 'hidden_dims' [8] (checkpoint) vs [16] (this run)"),
    ],
)
def test_another_module_or_hyperparameters_are_refused(tmp_path, tiny_federation, resumed, named):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    with pytest.raises(ValueError, match=re.escape(named)) as refused:
        make_trainer(tmp_path, rounds=2).fit(resumed(), tiny_federation, ckpt_path="last")
    assert "was written by another run" in str(refused.value)
    with pytest.raises(ValueError, match=re.escape(named)):  # evaluation refuses it too
        make_trainer(tmp_path).test(resumed(), tiny_federation, ckpt_path="last")


def test_the_same_ids_over_other_data_are_refused(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    other = FederatedDataModule(  # the same ids and sizes, other samples for "b" and "c"
        [
            make_client("a", 40, 0, classes=(0, 1)),
            make_client("b", 32, 11, classes=(1, 2)),
            make_client("c", 48, 12, classes=(0, 1, 2)),
            make_client("d", 24, 3, classes=(2,)),
        ]
    )
    message = "client 'b' data content (its hash differs); client 'c' data content (its hash differs)"
    with pytest.raises(ValueError, match=re.escape(message)):
        make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), other, ckpt_path="last")


class Tally(FederatedCallback):
    """A stateful callback: adds its step every round."""

    def __init__(self, step):
        self.step, self.total = step, 0

    def on_round_end(self, round_idx):
        self.total += self.step

    def state_dict(self):
        return {"total": self.total}

    def load_state_dict(self, state):
        self.total = state["total"]


def test_two_callbacks_of_one_class_keep_their_own_state(tmp_path, tiny_federation):
    first = [Tally(1), Tally(100)]
    make_trainer(tmp_path, rounds=2, callbacks=first).fit(FedRep(hidden_dims=[8]), tiny_federation)
    resumed = [Tally(1), Tally(100)]
    make_trainer(tmp_path, rounds=3, callbacks=resumed).fit(FedRep(hidden_dims=[8]), tiny_federation, "last")
    assert [cb.total for cb in resumed] == [3, 300]
    with pytest.raises(ValueError, match=re.escape("stateful callbacks ['Tally', 'Tally#1'] (checkpoint) vs")):
        make_trainer(tmp_path, rounds=4, callbacks=[Tally(1)]).fit(FedRep(hidden_dims=[8]), tiny_federation, "last")


def test_the_payload_digest_hashes_the_documented_bytes():
    """Structure, scalars and tensors in order, byte for byte as written: checkpoints of older fedhet still verify."""
    weight = torch.tensor([1.5, -2.0])
    state = {"w": weight, "history": [{"round": 0, "val/acc": 0.5, "note": None}], "pair": (True, "x")}
    expected = hashlib.sha256(
        b"D3:"
        + b"str='w';Ttorch.float32(2,):"
        + weight.numpy().tobytes()
        + b"str='history';l1:D3:str='round';int=0;str='val/acc';float=0.5;str='note';NoneType=None;"
        + b"str='pair';t2:bool=True;str='x';"
    ).hexdigest()
    assert payload_digest(state) == expected
