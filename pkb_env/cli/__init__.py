"""`pkb-env`: list tasks, show a prompt, judge files, evaluate an agent, run the demo episode, calibrate, turn
recorded episodes into training data (`data`, cli/data.py).

Every command that judges is a thin client of one JudgeService (pkb_env/service.py): the options make a
JudgeConfig (options.py), the commands (commands.py) open tasks and judge through it.

Exit codes are part of the interface (CI jobs gate on them); see `pkb-env eval --help` and EXIT_CODES.
Ctrl-C and SIGTERM end a command cleanly: the rank processes are stopped and the executor's temporary
directory removed before the exit (130 for Ctrl-C, 143 for SIGTERM), with one line instead of a traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

from pkb_env.cli.exits import EXIT_CODES, EXIT_INTERRUPTED, EXIT_JUDGE_FAILURE, EXIT_TERMINATED, EXIT_USAGE
from pkb_env.cli.options import parser, with_config
from pkb_env.errors import JudgeError, PoolError
from pkb_env.extras import MissingExtra

__all__ = ["main", "EXIT_CODES", "EXIT_USAGE", "EXIT_JUDGE_FAILURE", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks (the service's close) run before the exit.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)  # argparse's own usage errors exit here with code 2
    with _sigterm_raises():
        try:
            args = with_config(cli, args, argv)
            if getattr(args, "limits_world_size", False) and getattr(args, "ray", None) is None:  # a pool's nodes decide
                from pkb_env.executors import check_world_size

                check_world_size(args.executor, args.world_size)  # before torch is imported or anything starts
            return args.run(args)
        except KeyboardInterrupt:
            print("pkb-env: interrupted (Ctrl-C); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated:
            print("pkb-env: terminated (SIGTERM); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_TERMINATED
        except (ValueError, FileNotFoundError, MissingExtra) as exc:  # TaskError, ExecutorError, ConfigError: ValueErrors
            print(f"pkb-env: error: {exc}", file=sys.stderr)
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


@contextmanager
def _sigterm_raises():
    """SIGTERM raises Terminated for the block (main thread, and only where nobody else set a handler)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
