"""Run a fedhet federation on Flower (https://flower.ai): ``pip install "fedhet[flower]"``, see docs/deployment.md.

:func:`flower_apps` turns a ``fedhet fit`` config into a Flower ``ServerApp`` (the engine's round: sampling,
aggregation, the method's server-side callbacks) and ``ClientApp`` (one client's local work with the engine's own
local loop, its personal state kept on its node).
"""

from fedhet.integrations.flower.apps import flower_apps
from fedhet.integrations.flower.engine import ClientRunner, RemoteFederation, RemoteTrainer, load_run

__all__ = ["ClientRunner", "RemoteFederation", "RemoteTrainer", "flower_apps", "load_run"]
