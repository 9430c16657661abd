r"""FLIC's local schedule: which phases a client runs in a round, before it trains, and as a new client.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024. Each round the
personal phase trains :math:`(\phi_i, \beta_i)` and FLIC-HL's representation phase :math:`\alpha`; at a client's first
participation a preparation phase pre-trains :math:`\phi_i` towards the anchors, at later ones it re-aligns it
(:mod:`~fedhet.modules.flic_pretraining`). :class:`FLICSchedule` holds the options that shape it, including the
reference code's switches (``rep_start_round``, ``final_local_epochs``, ``realign_epochs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedhet.core import LocalPhase
from fedhet.modules.flic_pretraining import ALIGNMENT_PHASES

PERSONAL = ("body.embed.*", "head.*")
REPRESENTATION = ("body.hidden.*",)
EMBEDDING = ("body.embed.*",)


@dataclass(frozen=True)
class FLICSchedule:
    r"""The phases of a FLIC client.

    Args:
        representation: FLIC-HL's representation phase exists (a shared hidden layer :math:`\alpha`).
        rep_epochs: epochs of the representation phase per round.
        rep_start_round: first round that trains :math:`\alpha`.
        final_local_epochs: if set, the last round trains only :math:`\phi_i, \beta_i` for this many epochs.
        pretrain_epochs: pre-training epochs of :math:`\phi_i` at the first participation (0: none).
        realign_epochs: re-alignment epochs at the start of every later participation.
        pretrain_batch_size: batch size of the preparation phases (``None``: the client's training batches).

    """

    representation: bool
    rep_epochs: int = 1
    rep_start_round: int = 0
    final_local_epochs: int | None = None
    pretrain_epochs: int = 100
    realign_epochs: int = 0
    pretrain_batch_size: int | None = None

    def local(self, optimizer: int | tuple[int, ...], round_idx: int | None, final_round: bool) -> list[LocalPhase]:
        r"""The personal phase (:math:`\phi_i, \beta_i`), then FLIC-HL's representation phase (:math:`\alpha`).

        Args:
            optimizer: what each phase steps (the model's, and the anchor copy's with the code's anchor rule).
            round_idx: the round being trained (``None``: not known, under a plain Trainer).
            final_round: whether it is the federation's last.

        """
        if final_round and self.final_local_epochs:
            return [LocalPhase("local", PERSONAL, epochs=self.final_local_epochs, optimizer=optimizer)]
        phases = [LocalPhase("local", PERSONAL, optimizer=optimizer)]
        late = round_idx is None or round_idx >= self.rep_start_round
        if self.representation and self.rep_epochs and late:
            phases.append(LocalPhase("representation", REPRESENTATION, epochs=self.rep_epochs, optimizer=optimizer))
        return phases

    def preparation(self, pretrained: bool) -> list[LocalPhase]:
        r"""Pre-training of :math:`\phi_i` at the first participation, re-alignment at later ones (none for 0 epochs).

        The phase trains ``body.embed`` alone with its own Adam (optimizer 1), reporting ``train/pretrain_loss``.
        """
        epochs = self.realign_epochs if pretrained else self.pretrain_epochs
        if not epochs:
            return []
        name = ALIGNMENT_PHASES[int(pretrained)]
        batch_size = self.pretrain_batch_size
        return [LocalPhase(name, EMBEDDING, epochs, optimizer=1, batch_size=batch_size, loss_key="train/pretrain_loss")]

    def new_client(self, optimizer: int | tuple[int, ...]) -> list[LocalPhase]:
        r"""A client joining after training: :math:`\phi` pre-trained towards the anchors, then :math:`(\phi, \beta)`.

        As the paper's new clients do (Supplement S1.4); each phase runs for the engine's new-client budget, and a
        module that never pre-trains (``pretrain_epochs=0``) runs the personal phase alone.
        """
        phases = [LocalPhase("local", PERSONAL, optimizer=optimizer)]
        if not self.pretrain_epochs:
            return phases
        batch_size = self.pretrain_batch_size
        loss_key = "train/pretrain_loss"
        pretrain = LocalPhase(ALIGNMENT_PHASES[0], EMBEDDING, optimizer=1, batch_size=batch_size, loss_key=loss_key)
        return [pretrain, *phases]
