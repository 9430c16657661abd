"""What the server-callback tests share: a trainer stand-in and a checkpoint round trip."""

import io
from types import SimpleNamespace

import torch

#: A trainer as a server callback sees it, where only the callback's logging is used (and dropped)
TRAINER = SimpleNamespace(log_dict=lambda metrics, step: None)


def roundtrip(state):
    """``state`` saved and loaded back as a checkpoint is (``weights_only=True``)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)
