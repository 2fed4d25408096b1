"""A user's settings for the judge, as the doors receive them: a trainer's mapping, a command line, a YAML file.

Trainers hand their settings over as plain (or OmegaConf) mappings (verl's reward_kwargs, SkyRL's env_config, a
server's YAML). `read_settings` splits one into a JudgeConfig and the door's own options, refusing unknown names
with the closest known one; `reward_function` loads the reward they name once per process. `where` names the
trainer's setting in every error, so that the message points at the line to fix.

The command lines (`pkb-env`, `python -m pkb_env.entrypoints.openenv`) share their judge options and --config
files: `add_placement` and `add_judging` define them, `with_config` reads a file under the command line, and
`judge_config` makes the JudgeConfig of the parsed options.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pkb_env.config import EXECUTORS, ConfigError, JudgeConfig


@dataclass(frozen=True)
class Settings:
    """What a door judges with: the judge's config, and the door's own options (name: value)."""

    config: JudgeConfig
    options: dict


def plain(value: Any) -> Any:
    """Mappings and sequences as dicts and lists (OmegaConf's DictConfig/ListConfig, which trainers pass), numpy
    scalars as Python's (a parquet column read back may give numpy.int32, which JudgeConfig refuses)."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def read_settings(values: Mapping[str, Any] | None, where: str, options: Mapping[str, Any]) -> Settings:
    """Split `values` into JudgeConfig settings and the door's `options` (name: default)."""
    values = plain(values or {})
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping of setting: value, got {type(values).__name__}")
    values = {k.replace("-", "_"): v for k, v in values.items()}
    own = {name: values.pop(name, default) for name, default in options.items()}
    try:
        config = JudgeConfig.from_mapping(values)
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}; besides the judge's settings it takes {', '.join(options)}") from exc
    return Settings(config, own)


@functools.lru_cache(maxsize=None)
def reward_function(name: Any, where: str):
    """The reward named in the settings at `where`, loaded once (rewards are pure functions of a record)."""
    from pkb_env.rewards import load_reward

    if not isinstance(name, str):
        raise ConfigError(f"{where}: reward must be a reward config's name or a YAML path, got {name!r}")
    try:
        return load_reward(name)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{where}: reward: {exc}") from exc


# -- command lines ------------------------------------------------------------------------------------------
CONFIG_HELP = """config file (--config FILE): a YAML mapping of this command's options, by their long names
(dashes or underscores), and of judge settings (pkb_env.JudgeConfig's fields), e.g.
  world_size: 2
  executor: cpu
  reward: fast_1
  trials: 5
  step_budget_s: 300
Options given on the command line win over the file."""


def judge_config(args: argparse.Namespace) -> JudgeConfig:
    """The JudgeConfig of a command: its placement options over the judge settings of its --config file."""
    settings = dict(getattr(args, "judge_settings", None) or {})
    for name in ("executor", "world_size", "preset", "dtype"):
        if hasattr(args, name):
            settings[name] = getattr(args, name)
    if getattr(args, "pkb", False):   # eval --pkb: PKB-format files
        settings["pkb"] = True
    if getattr(args, "no_timing", False):   # verdicts only
        settings["timing"] = False
    return JudgeConfig.from_mapping(settings)


def add_placement(p: argparse.ArgumentParser) -> None:
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


def add_judging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reward", default="default",
                   help="the env's reward: the name of a config in configs/rewards/ (`default`: the shaped reward; "
                        "`fast_1`: 1 for correct and faster, else 0) or the path of a reward YAML file "
                        "(default: default)")
    p.add_argument("--no-timing", action="store_true",
                   help="verdicts only: a correct candidate is not timed (no speedup, no roofline; the reward's "
                        "performance term is 'not measured'), about half a correct step's time (JudgeConfig.timing)")
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
            known = sorted(actions) + (sorted(settings) if judges else [])
            close = difflib.get_close_matches(dest, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            also = f", and judge settings {', '.join(sorted(settings))}" if judges else ""
            raise ValueError(f"--config {path}: unknown option {key!r}; {hint}this command takes "
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
