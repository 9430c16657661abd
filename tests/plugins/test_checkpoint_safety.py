"""Checkpoints are untrusted input: what they hold may not write outside the run (issue 16, item 3)."""

import pytest

from fedhet.modules import FedRep
from fedhet.plugins.checkpoint import load_checkpoint, save_checkpoint
from tests.plugins.test_trainer import make_trainer


def _tamper(path, **fields):
    """Rewrite a checkpoint with some fields changed, as a crafted file would be (a valid checkpoint otherwise)."""
    state = load_checkpoint(path)
    state.update(fields)
    save_checkpoint(path, {k: v for k, v in state.items() if k not in ("format", "version")})


@pytest.mark.parametrize("version", ["../../victim", "<absolute>", "version_0/../../../victim", ""])
def test_a_logger_version_that_leaves_the_run_is_refused(tmp_path, tiny_federation, version):
    version = str(tmp_path / "victim") if version == "<absolute>" else version
    run = tmp_path / "runs" / "mine"
    make_trainer(run, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    ckpt = run / "checkpoints" / "last.ckpt"
    _tamper(ckpt, logger_versions=[version])
    with pytest.raises(ValueError, match="field 'logger_versions' holds"):
        make_trainer(run, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path=str(ckpt))
    assert not (tmp_path / "victim").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_logger_version_inside_the_run_resumes(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation)
    _tamper(tmp_path / "checkpoints" / "last.ckpt", logger_versions=["renamed"])
    trainer = make_trainer(tmp_path, rounds=2)
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert (tmp_path / "logs" / "renamed" / "metrics.csv").is_file()
