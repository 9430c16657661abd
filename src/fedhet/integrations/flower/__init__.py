"""Run a fedhet federation on Flower (https://flower.ai): ``pip install "fedhet[flower]"``, see docs/deployment.md.

:func:`make_server_app` and :func:`make_client_app` turn a ``fedhet fit`` config into a Flower ``ServerApp`` (the
engine's round: sampling, aggregation, the method's server-side callbacks) and ``ClientApp`` (one client's local work
with the engine's own local loop, its personal state kept on its node).
"""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.integrations.flower.apps import make_client_app, make_server_app, serve
    from fedhet.integrations.flower.engine import NodeClient, RemoteFederation, RemoteRunner, load_run

__all__ = ["NodeClient", "RemoteFederation", "RemoteRunner", "load_run", "make_client_app", "make_server_app", "serve"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
