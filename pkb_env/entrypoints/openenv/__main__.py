"""`pkb-env serve` (and `python -m pkb_env.entrypoints.openenv`): the judge as an OpenEnv server.

Its options are the judge's (as `pkb-env eval` takes them: pkb_env/settings.py) and the server's own; `pkb-env
serve ARGS` hands its arguments to this program as they are (pkb_env/entrypoints/cli/__init__.py), so that the
server, a door of its own, needs nothing of the command line's. Ctrl-C and SIGTERM stop it; the judge's processes
stop before it exits.
"""
from __future__ import annotations

import argparse
import sys

from pkb_env.settings import CONFIG_HELP, add_judging, add_placement, judge_config, with_config
from pkb_env.signals import Terminated, sigterm_raises

HELP = ("serve the judge as an OpenEnv environment (uvicorn; WebSocket /ws, /health, /schema, /state): each session "
        "holds an episode, all share one judge (pip install 'pkb-env[openenv]')")


def parser(prog: str = "pkb-env serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=HELP, epilog=CONFIG_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(limits_world_size=True)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--max-sessions", type=int, default=4,
                   help="WebSocket sessions at once; one more is refused with CAPACITY_REACHED (default 4). Their "
                        "steps queue on the one judge")
    p.add_argument("--max-turns", type=int, default=4, help="attempts per episode (default 4)")
    p.add_argument("--target-speedup", type=float, default=1.0,
                   help="an episode is done when a correct attempt reaches this speedup (default 1.0)")
    add_placement(p)
    add_judging(p)
    p.set_defaults(subparser=p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit codes as `pkb-env`'s: 0 after a clean stop, 2 for bad options, 130 on Ctrl-C, 143 on SIGTERM (after the
    judge's processes stopped: uvicorn's own stop hands the signal back here once it has shut down)."""
    cli = parser()
    args = cli.parse_args(argv)
    with sigterm_raises():
        try:
            args = with_config(cli, args, argv)
            from pkb_env.executors import check_world_size

            check_world_size(args.executor, args.world_size)   # before torch is imported or anything starts
            from pkb_env.entrypoints.openenv.server import ServeSettings, serve

            settings = ServeSettings(max_sessions=args.max_sessions, max_turns=args.max_turns,
                                     target_speedup=args.target_speedup, reward=args.reward)
            settings.check()
            serve(judge_config(args), settings, host=args.host, port=args.port)
        except KeyboardInterrupt:
            print("pkb-env serve: interrupted (Ctrl-C); rank processes stopped", file=sys.stderr)
            return 130
        except Terminated:
            print("pkb-env serve: terminated (SIGTERM); rank processes stopped", file=sys.stderr)
            return 143
        except ValueError as exc:   # TaskError, ConfigError, ExecutorError, bad settings: the message names the fix
            print(f"pkb-env serve: error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
