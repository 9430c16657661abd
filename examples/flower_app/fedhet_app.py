"""The Flower App of a fedhet federation: fedhet's ServerApp and ClientApp for the config beside this file."""

from pathlib import Path

from fedhet.integrations.flower import make_client_app, make_server_app

CONFIG = Path(__file__).with_name("federation.yaml")
server_app = make_server_app(CONFIG)
client_app = make_client_app(CONFIG)
