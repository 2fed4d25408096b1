"""pkb-env as an OpenEnv environment: the client side (`PkbEnvClient` and its models, client.py) and the server
(server.py), which `pkb-env serve` runs as `python -m pkb_env.entrypoints.openenv` (docs/integrations.md).

Needs `pip install 'pkb-env[openenv]'`; importing this package imports OpenEnv's client (not the server's uvicorn).
"""
from pkb_env.entrypoints.openenv.client import (ENV_NAME, PkbAction, PkbEnvClient, PkbObservation, PkbState,
                                                server_reward)

__all__ = ["ENV_NAME", "PkbAction", "PkbEnvClient", "PkbObservation", "PkbState", "server_reward"]
