"""Imported by the warm fork server of a suite (:data:`fedhet.experiments.warm.PRELOAD`): the command parsers, once.

Building a command's parser reads the trainer's, the modules' and the federations' signatures, type hints and
docstrings, which jsonargparse and Lightning cache; a run's child built its ``fit`` and ``test`` parsers from cold
caches (about 0.03 CPU s of the heart-sites ``fit``'s start-up, measured in warm children). Here the server builds
each of them once with no config: the parse stops at the missing model (a usage error, its message discarded),
before anything is read, built or seeded, so the server still runs no computation and a child's run is unchanged.
Then it builds each parser once more and keeps it, unparsed (``FederatedCLI(prebuild=True)``): a run's ``fit`` and
``test`` take these instead of building their own (about 0.4 of a parse's CPU), each child its own forked copy.
"""

from __future__ import annotations

import contextlib
import io

from fedhet.cli._lightning import FederatedCLI, ParserPrebuilt

for _subcommand in ("fit", "test"):
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with quiet[0], quiet[1], contextlib.suppress(SystemExit):  # the usage error expected without a config
        FederatedCLI(args=[_subcommand])
    with contextlib.suppress(ParserPrebuilt):  # the parser a run's command takes (fedhet.cli._lightning.run's)
        FederatedCLI(args=[_subcommand], prebuild=True)
