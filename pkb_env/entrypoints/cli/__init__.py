"""`pkb-env`: list tasks, show a prompt, judge files, evaluate an agent, run the demo episode, calibrate, turn
recorded episodes into training data (`data`, cli/data.py).

Every command that judges is a thin client of one judge client (pkb_env/client.py: a LocalClient, or with --ray
a JudgePool): the options make a JudgeConfig (pkb_env/settings.py), the commands (commands.py) judge through it.
`pkb-env serve` is the OpenEnv server's own program (pkb_env/entrypoints/openenv/__main__.py), handed its
arguments as they are.

Exit codes are part of the interface (CI jobs gate on them); see `pkb-env eval --help` and EXIT_CODES.
Ctrl-C and SIGTERM end a command cleanly: the rank processes are stopped and the executor's temporary
directory removed before the exit (130 for Ctrl-C, 143 for SIGTERM), with one line instead of a traceback.
"""
from __future__ import annotations

import os
import sys

from pkb_env.entrypoints.cli.exits import EXIT_CODES, EXIT_INTERRUPTED, EXIT_JUDGE_FAILURE, EXIT_TERMINATED, EXIT_USAGE
from pkb_env.entrypoints.cli.options import parser
from pkb_env.entrypoints.cli.refusals import refuse
from pkb_env.errors import JudgeError, PoolError
from pkb_env.extras import MissingExtra
from pkb_env.settings import with_config
from pkb_env.signals import Terminated, sigterm_raises

__all__ = ["main", "EXIT_CODES", "EXIT_USAGE", "EXIT_JUDGE_FAILURE", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["serve"]:   # the server's own program, in this process (its signals, its exit code)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "pkb_env.entrypoints.openenv", *given[1:]])
    cli = parser()
    args = cli.parse_args(argv)  # argparse's own usage errors exit here with code 2
    with sigterm_raises():
        try:
            args = with_config(cli, args, argv)
            if getattr(args, "limits_world_size", False) and getattr(args, "ray", None) is None:  # a pool's nodes decide
                from pkb_env.executors import check_world_size

                check_world_size(args.executor, args.world_size)  # before torch is imported or anything starts
            refuse(args)   # bad tasks, sizes and files: before torch is imported too
            return args.run(args)
        except KeyboardInterrupt:
            print("pkb-env: interrupted (Ctrl-C); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated:
            print("pkb-env: terminated (SIGTERM); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_TERMINATED
        except (ValueError, FileNotFoundError, MissingExtra) as exc:  # TaskError, ExecutorError, ConfigError: ValueErrors
            print(f"pkb-env: error: {getattr(exc, 'command_line', exc)}", file=sys.stderr)   # the fix in flags
            return EXIT_USAGE
        except JudgeError as exc:  # the reference or containment failed: not the candidate's fault
            print(f"pkb-env: judge failure ({type(exc).__name__}): {exc}", file=sys.stderr)
            return EXIT_JUDGE_FAILURE
        except PoolError as exc:   # --ray: no cluster there, or one too small
            print(f"pkb-env: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except BrokenPipeError:  # `pkb-env tasks | head`: the reader has gone; nothing left to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            return 0


if __name__ == "__main__":
    sys.exit(main())
