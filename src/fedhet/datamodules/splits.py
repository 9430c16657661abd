"""The split arguments every built federation takes (held-out shares, batch sizes, seed), checked and recorded once."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from fedhet.datamodules.federated import FederatedDataModule
from fedhet.datamodules.validation import check_split_arguments

_REQUIRED = ("batch_size", "eval_batch_size", "seed")


class SplitFederation(FederatedDataModule):
    """A federation that builds its clients and splits each one's samples: the split arguments, checked and recorded.

    A subclass keeps the split arguments, with its own defaults, in its own signature (so that ``fedhet fit --help``
    and the configs' flat keys ``data.init_args.val_fraction``, ... stay as they are) and calls ``super().__init__()``
    first. This constructor reads the split arguments from the subclass's constructor that called it (as Lightning's
    ``save_hyperparameters`` reads a constructor's arguments), checks them before any data is read, keeps them as
    attributes and records the subclass's arguments as its hyperparameters (``self.hparams``). A subclass's docstring
    describes a split argument only where it means more there than below (``fedhet fit --help`` reads both, the
    subclass's first). A subclass that holds out data otherwise (by counts, repetitions or a test pool of its own) does
    not take the share it has no use for; it is then ``None``.

    Args:
        val_fraction: share of each client's samples held out for validation.
        test_fraction: share of each client's samples held out for testing.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size.
        seed: seed of the federation's draws; each client's split derives its own seed from it.

    Attributes:
        val_fraction: the validation share, or ``None``.
        test_fraction: the test share, or ``None``.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size.
        seed: the federation's seed.

    Raises:
        TypeError: naming the class and the field, when the subclass's constructor does not take ``batch_size``,
            ``eval_batch_size`` or ``seed``, a share is not a number or a batch size not an int.
        ValueError: naming the class and the field, when a share is outside ``[0, 1)``, the shares leave no training
            samples or a batch size is below 1.

    """

    def __init__(self, *, val_of_rest: bool = False, ignore: Sequence[str] = ()) -> None:
        """Record the subclass's arguments, then check and keep the split arguments among them.

        Args:
            val_of_rest: ``val_fraction`` is a share of the samples left after the test part (the two shares need
                not sum below 1), not a share of all of them.
            ignore: constructor arguments not to record, e.g. a dataset given as tensors.

        """
        super().__init__()
        here = inspect.currentframe()
        caller = here.f_back if here is not None else None
        # The caller is the subclass's constructor: its arguments are recorded (with those of its own subclasses, which
        # Lightning collects on its way up, in the order of its signature) and its split arguments are read.
        self.save_hyperparameters(ignore=list(ignore), frame=caller)
        given = caller.f_locals if caller is not None else {}
        owner = type(self).__name__
        missing = [name for name in _REQUIRED if name not in given]
        if missing:
            raise TypeError(f"{owner}: its constructor must take the split argument(s) {missing} (see SplitFederation)")
        self.val_fraction: float | None = given.get("val_fraction")
        self.test_fraction: float | None = given.get("test_fraction")
        self.batch_size: int = given["batch_size"]
        self.eval_batch_size: int = given["eval_batch_size"]
        self.seed: int = given["seed"]
        check_split_arguments(
            owner, self.val_fraction, self.test_fraction, self.batch_size, self.eval_batch_size, val_of_rest
        )
