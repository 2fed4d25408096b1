"""The command line's options: the parser, and --config files (a YAML mapping of a command's options and of
judge settings, which become the command's JudgeConfig)."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from pkb_env import __version__
from pkb_env.cli.commands import (cmd_calibrate, cmd_demo, cmd_eval, cmd_evaluate, cmd_show, cmd_tasks,
                                  cmd_topology)
from pkb_env.cli.data import add_data_command
from pkb_env.cli.serve import SERVE_HELP, add_serve_arguments, cmd_serve
from pkb_env.cli.exits import EVALUATE_EXIT_HELP, EXIT_CODES_HELP
from pkb_env.config import EXECUTORS, JudgeConfig

DESCRIPTION = ("list tasks, show a prompt, judge files, evaluate an agent, run the demo episode, calibrate, "
               "turn recorded episodes into training data, serve the judge as an OpenEnv environment")

CONFIG_HELP = """config file (--config FILE): a YAML mapping of this command's options, by their long names
(dashes or underscores), and of judge settings (pkb_env.JudgeConfig's fields), e.g.
  world_size: 2
  executor: cpu
  reward: fast_1
  trials: 5
  step_budget_s: 300
Options given on the command line win over the file."""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pkb-env", description=DESCRIPTION,
                                     epilog="`pkb-env COMMAND --help` describes each command and its options.")
    parser.add_argument("--version", action="version", version=f"pkb-env {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help: str, run, epilog: str | None = None, judges: bool = False):
        """`judges`: the command starts a judge (its world size is checked against the machine before
        anything starts, and its --config file may hold judge settings)."""
        p = sub.add_parser(name, help=help, description=help, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(run=run, limits_world_size=judges, subparser=p)
        return p

    p = command("tasks", "list the task suite, grouped by family", cmd_tasks)

    p = command("show", "print the prompt a model sees for a task", cmd_show)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    _placement(p)

    p = command("eval", "judge a candidate file (or each .py file of a folder) on a task: per-stage table, "
                        "verdict, reward, feedback", cmd_eval, epilog=EXIT_CODES_HELP + "\n\n" + CONFIG_HELP, judges=True)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    p.add_argument("path", type=Path, help="a .py file holding the candidate module (or a model's raw completion "
                                           "with a ```python block), or a folder: each of its .py files in turn")
    p.add_argument("--json", action="store_true", help="print one JSON line per file (the full evaluation record) "
                                                       "instead of the tables")
    _placement(p)
    _judging(p)

    p = command("evaluate", "run an agent over the suite: pass@k, fast_p, roofline; writes JSON, Markdown and a PNG",
                cmd_evaluate, epilog=EVALUATE_EXIT_HELP + "\n\n" + CONFIG_HELP, judges=True)
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all; with --agent files:DIR, "
                                                 "the tasks DIR has files for)")
    p.add_argument("--agent", default="reference", help="reference (the task's own reference: the speedup-1 "
                                                        "baseline) | files:DIR (DIR holds one <task>.py per task)")
    p.add_argument("--samples", type=int, default=1, help="samples per task (default 1)")
    p.add_argument("--k", default="1", help="comma-separated k of pass@k, each <= --samples (default 1)")
    p.add_argument("--out", type=Path, default=Path("pkb-eval"), help="output folder (default ./pkb-eval)")
    p.add_argument("--dataset", type=Path, default=None, metavar="DIR",
                   help="also record every judged sample as a row of the episode dataset DIR (docs/data.md)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="judge on a Ray pool of judges: 'local' starts a cluster for the run, 'auto' joins the one "
                        "`ray start --head` started here, ray://HOST:PORT a remote one (pip install 'pkb-env[ray]'; "
                        "docs/scale_out.md)")
    p.add_argument("--actors", type=int, default=None,
                   help="with --ray: judge actors (default: as many as the cluster holds)")
    p.add_argument("--cpus-per-actor", type=float, default=None,
                   help="with --ray: CPUs each actor claims (default: the world size for cpu, 1 for GPU executors)")
    _placement(p)
    _judging(p)

    p = command("demo", "an evaluation episode on all_reduce: the reference, a ring of send/recv, a wrong candidate "
                        "(exit 0 when the three verdicts are the expected ones)", cmd_demo, judges=True)
    _placement(p)
    _judging(p)

    add_data_command(command)

    p = command("serve", SERVE_HELP, cmd_serve, epilog=CONFIG_HELP, judges=True)
    add_serve_arguments(p)
    _placement(p)
    _judging(p)

    command("topology", "show the GPUs, their links, the topology config that applies, and the containment "
                        "candidates get here", cmd_topology)

    p = command("calibrate", "measure interconnect latency and bandwidth for the roofline (cached per machine and "
                             "world size)", cmd_calibrate, judges=True)
    p.add_argument("--world-size", type=int, default=4, help="ranks to calibrate with (default 4)")
    p.add_argument("--executor", default="auto", choices=EXECUTORS,
                   help="where ranks run: auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any) | "
                        "cpu | cuda | cuda-emulated (default auto)")
    return parser


def _placement(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", type=int, default=4,
                   help="ranks the candidate runs on (default 4); limited by this machine: CPU cores x 32 for cpu, "
                        "GPUs for cuda")
    p.add_argument("--executor", default="auto", choices=EXECUTORS,
                   help="where ranks run: auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any) | "
                        "cpu (processes over gloo) | cuda (one process per GPU, NCCL) | cuda-emulated (several "
                        "ranks per GPU: correctness only) (default auto)")
    p.add_argument("--preset", default="tiny", help="problem size: tiny (CPU-sized, milliseconds) | bench (PKB's "
                                                    "size) | large, where the task has it (default tiny)")
    p.add_argument("--dtype", default=None, help="element type, e.g. float32, bfloat16 (default: the preset's)")


def _judging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reward", default="default",
                   help="the env's reward: the name of a config in configs/rewards/ (`default`: the shaped reward; "
                        "`fast_1`: 1 for correct and faster, else 0) or the path of a reward YAML file "
                        "(default: default)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="a YAML file of this command's options and judge settings (see below); the command "
                        "line wins over it")


def with_config(parser: argparse.ArgumentParser, args: argparse.Namespace, argv) -> argparse.Namespace:
    """Options from --config FILE become the subcommand's defaults; the command line is parsed again over them."""
    path = getattr(args, "config", None)
    if path is None:
        return args
    args.subparser.set_defaults(**config_defaults(args.subparser, path))
    return parser.parse_args(argv)


def config_defaults(subparser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The options a YAML config file sets, checked and converted like command-line values; keys that name
    judge settings (JudgeConfig's fields) are gathered under `judge_settings`."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror}); pass the path of a YAML file") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path} is not valid YAML ({exc}); fix the file") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"--config {path} must be a YAML mapping of option: value (e.g. `world_size: 2`), "
                         f"got {type(data).__name__}")
    actions = {a.dest: a for a in subparser._actions if a.option_strings and a.dest not in ("help", "config")}
    judges = bool(subparser.get_default("limits_world_size"))
    settings = {f.name for f in dataclasses.fields(JudgeConfig)} - set(actions)
    values: dict[str, Any] = {}
    judge: dict[str, Any] = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        action = actions.get(dest)
        if action is not None:
            values[dest] = _config_value(path, key, action, value)
        elif dest in settings and judges:
            judge[dest] = value
        else:
            also = f", and judge settings {', '.join(sorted(settings))}" if judges else ""
            raise ValueError(f"--config {path}: unknown option {key!r}; this command takes "
                             f"{', '.join(sorted(actions))}{also}")
    if judge:
        JudgeConfig.from_mapping(judge)   # refused here, naming the setting, rather than when the command runs
        values["judge_settings"] = judge
    return values


def _config_value(path: Path, key: str, action: argparse.Action, value: Any) -> Any:
    if action.nargs == 0:  # a flag such as --json
        if not isinstance(value, bool):
            raise ValueError(f"--config {path}: {key} must be true or false, got {value!r}")
        return value
    if value is None:
        return None
    if isinstance(value, (list, tuple)):  # `k: [1, 4]` and `tasks: [a, b]` for the comma-separated options
        value = ",".join(str(v) for v in value)
    try:
        value = action.type(value if isinstance(value, str) else str(value)) if action.type else str(value)
    except (TypeError, ValueError):
        raise ValueError(f"--config {path}: {key}: {value!r} is not a valid value ({action.help})") from None
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"--config {path}: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value
