"""Client runners: how a process trains its clients of a round, one by one or in stacks, on one shared code path.

Every local runner (:class:`LocalRunner`) goes through the same steps for each client, in client order, using only a
:class:`~fedhet.plugins.clients.context.ClientContext`:

1. :meth:`ClientContext.start <fedhet.plugins.clients.context.ClientContext.start>` loads the client's personal state
   and the server's payload into its architecture's module and fires ``on_client_fit_start(trainer, round_idx,
   client_id, module)``;
2. the runner trains it (:meth:`LocalRunner.submit`): at once (:class:`SequentialRunner`), or once a stack of
   clients like it is full or the round's clients are all submitted
   (:class:`~fedhet.plugins.StackedRunner`);
3. :meth:`ClientContext.finish <fedhet.plugins.clients.context.ClientContext.finish>` builds its upload, fires
   ``on_client_fit_end(trainer, round_idx, client_id, module, update)`` with the module holding its trained state,
   and admits the upload or records why not (the upload checks).

A client whose step 1, 2 or 3 raises is a failed client: it is named in the round's failures and its module's
tensors are re-read. **Hook order**: in the sequential runner each client's ``on_client_fit_end`` comes before the
next client's ``on_client_fit_start``; in the stacked runner every client of a stack gets ``on_client_fit_start``
(the module then holding that client's state) before the stack trains, and ``on_client_fit_end`` after, in client
order. A stack whose training raises fails all its clients.
"""

from __future__ import annotations

import gc
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fedhet.core import RoundUploads, rng_preserved
from fedhet.plugins.clients.context import ClientContext, ClientEvaluation, ClientJob

log = logging.getLogger(__name__)


class ClientRunner(ABC):
    """Trains a process's clients of one round and evaluates them; the trainer holds one (``trainer.runner``).

    :class:`LocalRunner` trains them here, through the context; a runner for a real federation (e.g. a Flower
    adapter) overrides :meth:`run` and :meth:`evaluate` to have each client's own machine do the same work.
    """

    #: whether the uploads come from outside this process (another machine's reply): the check against each
    #: client's declaration then also refuses training metrics the method does not log
    remote_uploads: bool = False

    def check(self, context: ClientContext) -> None:  # noqa: B027 - optional hook
        """Refuse, before any training, a federation this runner cannot train (naming why); any by default."""

    @abstractmethod
    def run(self, context: ClientContext, client_ids: Sequence[str], round_idx: int) -> RoundUploads:
        """Train ``client_ids`` (this process's clients of the round).

        Args:
            context: the federation as a runner sees it.
            client_ids: the clients to train.
            round_idx: the round.

        Returns:
            the admitted uploads (through :meth:`ClientContext.admit
            <fedhet.plugins.clients.context.ClientContext.admit>`), the failed clients and the bytes sent down.

        """

    def evaluate(
        self, context: ClientContext, client_ids: Sequence[str], stage: str, round_idx: int
    ) -> tuple[dict[str, ClientEvaluation], list[str]]:
        """Evaluate each client of ``client_ids`` on its ``stage`` split, one at a time.

        A client whose evaluation raises (e.g. its data loader fails) is named in the log and in the failed list; a
        client without such a split is in neither.

        Returns:
            each evaluated client's :class:`~fedhet.plugins.clients.context.ClientEvaluation`, and the failed clients.

        """
        evaluations: dict[str, ClientEvaluation] = {}
        failed: list[str] = []
        with rng_preserved([context.fabric.device]):  # a fine-tuning client seeds its draws (adaptation phases)
            for client_id in client_ids:
                try:
                    evaluation = context.evaluate(client_id, stage, round_idx)
                except Exception as err:  # an evaluation failure must not take a long run down
                    log.warning("round %d: client '%s' left out of the %s evaluation: %s: %s",
                                round_idx, client_id, stage, type(err).__name__, err)  # fmt: skip
                    failed.append(client_id)
                    context.slot(client_id).refresh()
                    continue
                if evaluation is not None:
                    evaluations[client_id] = evaluation
        return evaluations, failed


class LocalRunner(ClientRunner):
    """Trains the clients in this process: start, train (now or in a batch), finish, on the shared code path."""

    def run(self, context: ClientContext, client_ids: Sequence[str], round_idx: int) -> RoundUploads:
        """Start, train and finish each client of ``client_ids``, in order (see the module's docstring).

        Each client's draws are seeded on its own (``ClientContext.fit_seed``); torch's generators are restored once,
        after the round's clients, not after each. The objects that exist when the round starts are out of Python's
        garbage collector's reach until it ends (:func:`_old_objects_frozen`).
        """
        uploads = RoundUploads()
        with rng_preserved([context.fabric.device]), _old_objects_frozen():
            for client_id in client_ids:
                try:
                    self.submit(context, context.start(client_id, round_idx), uploads)
                except Exception as err:  # a failing client must not take the run down: it is left out and named
                    context.fail(client_id, err, uploads)
            self.flush(context, uploads)
        return uploads

    @abstractmethod
    def submit(self, context: ClientContext, job: ClientJob, uploads: RoundUploads) -> None:
        """Train a started client now or later; every client submitted is finished by the end of :meth:`flush`.

        Raises:
            Exception: when the client's own training or finishing raises (it is then recorded as failed).

        """

    @abstractmethod
    def flush(self, context: ClientContext, uploads: RoundUploads) -> None:
        """Train and finish the clients still waiting."""


class SequentialRunner(LocalRunner):
    """One client at a time, in its architecture's module, through its own ``training_step`` (any module)."""

    def submit(self, context: ClientContext, job: ClientJob, uploads: RoundUploads) -> None:
        """Train the client now and finish it."""
        context.finish(job, context.train(job), uploads)

    def flush(self, context: ClientContext, uploads: RoundUploads) -> None:
        """Nothing waits: every client is trained when it is submitted."""


@contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """Run a block with the objects that exist when it starts frozen (``gc.freeze``), unfrozen after it.

    A round allocates many small objects per client (dicts, uploads), which triggers the garbage collector; each of
    its full collections scans every object of the process (the libraries, the federation, every client's kept
    state: hundreds of thousands, ~0.3 s at 1,000 clients), work that grows with the clients and is not the round's.
    Frozen, they are left out of the round's collections; the round's own objects are still collected. Nothing is
    done when the collector is disabled or something else has frozen objects (its freeze is not undone).
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
