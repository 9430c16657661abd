"""UCI Vowel (Deterding data): eleven British English vowels spoken by fifteen speakers, one client per speaker.

Source: D. H. Deterding (1989), "Speaker Normalisation for Automatic Speech Recognition", PhD thesis, University of
Cambridge; "Connectionist Bench (Vowel Recognition - Deterding Data)", UCI Machine Learning Repository
(https://archive.ics.uci.edu/dataset/152/connectionist+bench+vowel+recognition+deterding+data), licence CC BY 4.0;
first used for classification by A. J. Robinson (1989), "Dynamic Error Propagation Networks", PhD thesis, Cambridge.
Every speaker (8 men, 7 women) said each of the words *heed, hid, head, had, hard, hud, hod, hoard, hood, who'd,
heard* six times; each utterance is described by log-area ratios of a 10th-order LPC analysis.

The bundled ``vowel.csv`` is the copy in the R package mlbench (F. Leisch and E. Dimitriadou, Debian package
``r-cran-mlbench``), which keeps **nine** of the ten log-area ratios: it drops the second one (``lar1``). Speakers are
natural clients: the same label space and the same class balance everywhere, but a voice (vocal-tract length, accent)
shifts every speaker's features, which is what speaker normalisation is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.datasets._common import derived_seed, fit_standardizer, parse_csv, vendored_bytes
from fedhet.datamodules.splits import SplitFederation

VOWELS: tuple[str, ...] = ("hid", "hId", "hEd", "hAd", "hYd", "had", "hOd", "hod", "hUd", "hud", "hed")
"""The eleven classes, indexed by label, as mlbench names them (the words heed, hid, head, had, hard, hud, hod,
hoard, hood, who'd, heard)."""

FEATURE_NAMES: tuple[str, ...] = ("lar0", "lar2", "lar3", "lar4", "lar5", "lar6", "lar7", "lar8", "lar9")
"""The nine log-area ratios of the bundled copy (``lar1`` is not in mlbench's copy)."""

NUM_SPEAKERS = 15
REPETITIONS = 6
NUM_CLASSES = len(VOWELS)
_ROWS_PER_SPEAKER = REPETITIONS * NUM_CLASSES


@dataclass(frozen=True)
class VowelData:
    """The 990 Deterding utterances.

    Attributes:
        x: log-area ratios, shape ``(990, 9)``, ``float32`` (see :data:`FEATURE_NAMES`).
        y: vowel labels, shape ``(990,)``, ``int64`` in ``[0, 11)`` (see :data:`VOWELS`).
        speaker: speaker of every row, shape ``(990,)``, ``int64`` in ``[0, 15)``.
        repetition: which of the speaker's six repetitions of the vowel the row is, shape ``(990,)``, ``int64``.

    """

    x: Tensor
    y: Tensor
    speaker: Tensor
    repetition: Tensor


@cache
def _read_table() -> np.ndarray:
    """Parse the bundled file once and check its layout: 990 rows of speaker, 9 features and label."""
    table = parse_csv(vendored_bytes("vowel.csv"), header=True)
    expected = (NUM_SPEAKERS * _ROWS_PER_SPEAKER, len(FEATURE_NAMES) + 2)
    if table.shape != expected:
        raise OSError(f"bundled vowel.csv has shape {table.shape}, expected {expected}")
    return table


def load_vowel() -> VowelData:
    """Load the Deterding vowel data bundled with fedhet: 15 speakers x 11 vowels x 6 repetitions, 9 features.

    Source: Deterding (1989), UCI Machine Learning Repository, CC BY 4.0, as copied in the R package mlbench (see
    the module docstring). The file lists each speaker's 66 utterances together, repetition by repetition, each
    repetition in the order of :data:`VOWELS`.

    Returns:
        features ``(990, 9)``, labels, speakers and repetition indices ``(990,)``.

    Raises:
        OSError: when the bundled file is damaged or does not have that layout.

    Example:
        >>> data = load_vowel()
        >>> tuple(data.x.shape), torch.bincount(data.speaker).tolist() == [66] * 15
        ((990, 9), True)

    """
    table = _read_table()
    speaker = table[:, 0].astype(np.int64)
    labels = table[:, -1].astype(np.int64)
    rows = np.arange(len(table))
    expected_speaker = rows // _ROWS_PER_SPEAKER
    expected_labels = rows % NUM_CLASSES
    if not (np.array_equal(speaker, expected_speaker) and np.array_equal(labels, expected_labels)):
        raise OSError("bundled vowel.csv does not list speakers and vowels in the documented order")
    return VowelData(
        x=torch.tensor(table[:, 1:-1], dtype=torch.float32),
        y=torch.from_numpy(labels),
        speaker=torch.from_numpy(speaker),
        repetition=torch.from_numpy((rows % _ROWS_PER_SPEAKER) // NUM_CLASSES),
    )


class _VowelConfig(Protocol):
    """The arguments :class:`VowelFederation` keeps in ``self.hparams`` (read by attribute)."""

    test_repetitions: int
    val_repetitions: int
    standardize: bool
    batch_size: int
    eval_batch_size: int
    seed: int


class VowelFederation(SplitFederation):
    """One client per speaker of the Deterding vowels: the same eleven classes everywhere, each voice its own shift.

    Every client holds one speaker's 66 utterances (six repetitions of each vowel). Whole repetitions are held out:
    ``test_repetitions`` of the six (and then ``val_repetitions``), drawn per speaker from the federation's seed, so
    every split holds each vowel equally often and no utterance of a repetition is in two splits. With ``standardize``
    each client standardises its features with the mean and deviation of **its own training part only** (a
    per-speaker normalisation, which removes part of the shift between speakers); off by default, so the speakers'
    shifts are what the methods face. Client ids are ``speaker_00`` ... ``speaker_14``.

    The classic benchmark split (speakers 0-7 train, 8-14 test) asks for speaker-independent recognition; this
    federation instead asks each speaker for a model of their own voice.

    ``batch_size``, ``eval_batch_size`` and ``seed`` are split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there (the held-out parts are repetitions, not shares);
    below, only what they mean here.

    Args:
        speakers: the speakers that are clients, from 0..14; all fifteen when ``None``.
        test_repetitions: repetitions of each vowel per speaker held out for testing, in ``[1, 5]``.
        val_repetitions: repetitions held out for validation; ``test_repetitions + val_repetitions`` must be below 6.
        standardize: whether each client standardises its features with its training statistics.
        seed: seed of the held-out repetitions and of the clients' batch order.

    Example:
        >>> federation = VowelFederation(speakers=[0, 14], test_repetitions=2)
        >>> [(spec.client_id, spec.input_dim, spec.num_train, spec.num_test) for spec in federation.specs.values()]
        [('speaker_00', 9, 44, 22), ('speaker_14', 9, 44, 22)]

    """

    def __init__(
        self,
        speakers: Sequence[int] | None = None,
        test_repetitions: int = 2,
        val_repetitions: int = 0,
        standardize: bool = False,
        batch_size: int = 11,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        chosen = list(range(NUM_SPEAKERS)) if speakers is None else list(speakers)
        if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= s < NUM_SPEAKERS for s in chosen):
            raise ValueError(f"`speakers` must list distinct speakers in [0, {NUM_SPEAKERS}), got {speakers}")
        if not 1 <= test_repetitions < REPETITIONS:
            raise ValueError(f"`test_repetitions` must be in [1, {REPETITIONS - 1}], got {test_repetitions}")
        if val_repetitions < 0 or test_repetitions + val_repetitions >= REPETITIONS:
            raise ValueError(
                f"`val_repetitions` must be >= 0 and leave at least one of {REPETITIONS} repetitions for training"
                f" (test_repetitions={test_repetitions}), got {val_repetitions}"
            )
        self.speakers = chosen

    @property
    def declared_num_clients(self) -> int:
        """The number of speakers, known without reading the data."""
        return len(self.speakers)

    def held_out_repetitions(self, speaker: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The repetitions of ``speaker`` held out for testing and for validation.

        Args:
            speaker: a speaker in 0..14.

        Returns:
            ``(test, val)`` repetition indices, each sorted.

        """
        config = cast(_VowelConfig, self.hparams)
        order = np.random.default_rng(derived_seed(config.seed, speaker)).permutation(REPETITIONS)
        test, val = order[: config.test_repetitions], order[config.test_repetitions :]
        return tuple(sorted(test.tolist())), tuple(sorted(val[: config.val_repetitions].tolist()))

    def build_clients(self) -> list[ClientDataModule]:
        """Split each speaker's utterances by repetition and build the clients.

        Returns:
            the clients ``speaker_00`` ... in the order of ``speakers``.

        """
        config = cast(_VowelConfig, self.hparams)
        data = load_vowel()
        clients = []
        for speaker in self.speakers:
            mine = data.speaker == speaker
            test_reps, val_reps = self.held_out_repetitions(speaker)
            held_test = torch.isin(data.repetition, torch.tensor(test_reps))
            held_val = torch.isin(data.repetition, torch.tensor(val_reps, dtype=torch.int64))
            train = mine & ~held_test & ~held_val
            x = data.x
            if config.standardize:
                mean, scale = fit_standardizer(data.x[train])
                x = (data.x - mean) / scale
            val, test = mine & held_val, mine & held_test
            held_out = held_out_splits((x[val], data.y[val]), (x[test], data.y[test]))
            clients.append(
                ClientDataModule(
                    f"speaker_{speaker:02d}",
                    x[train],
                    data.y[train],
                    NUM_CLASSES,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=derived_seed(config.seed, speaker),
                    **held_out,
                )
            )
        return clients
