"""`pkb-env serve`: the judge as an OpenEnv server (pkb_env/integrations/openenv_server.py, docs/integrations.md).
The options are `eval`'s judge options and the server's own; the work is the integration's."""
from __future__ import annotations

import argparse

SERVE_HELP = ("serve the judge as an OpenEnv environment (uvicorn; WebSocket /ws, /health, /schema, /state): each "
              "session holds an episode, all share one judge (pip install 'pkb-env[openenv]')")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The server's own options (the judge's are added by options.py, as for `eval`)."""
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--max-sessions", type=int, default=4,
                   help="WebSocket sessions at once; one more is refused with CAPACITY_REACHED (default 4). Their "
                        "steps queue on the one judge")
    p.add_argument("--max-turns", type=int, default=4, help="attempts per episode (default 4)")
    p.add_argument("--target-speedup", type=float, default=1.0,
                   help="an episode is done when a correct attempt reaches this speedup (default 1.0)")


def cmd_serve(args: argparse.Namespace) -> int:
    from pkb_env.cli.commands import judge_config
    from pkb_env.integrations.openenv_server import ServeSettings, serve

    settings = ServeSettings(max_sessions=args.max_sessions, max_turns=args.max_turns,
                             target_speedup=args.target_speedup, reward=args.reward)
    settings.check()
    serve(judge_config(args), settings, host=args.host, port=args.port)
    return 0
