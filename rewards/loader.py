"""Reward selection by name or path: configs/rewards/<name>.yaml, or any YAML file with a `kind:` key.

Names resolve through importlib.resources (package `pkb_env.configs.rewards`), so they work the same from
a checkout, an editable install or a wheel. Keyword overrides are applied on top of the file and then
validated like the file itself, so `load_reward("default", w_roofline=0)` fails loudly, not silently.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .base import RewardFunction
from .fast_p import FastP
from .shaped import ShapedReward

KINDS: dict[str, type[RewardFunction]] = {cls.kind: cls for cls in (ShapedReward, FastP)}
CONFIG_PACKAGE = "pkb_env.configs.rewards"


def available_configs() -> list[str]:
    """Names accepted by load_reward: the YAML files shipped in configs/rewards/."""
    root = resources.files(CONFIG_PACKAGE)
    return sorted(p.name.rsplit(".", 1)[0] for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path or "\\" in name_or_path


def _read(name_or_path: str) -> tuple[dict[str, Any], str]:
    if _is_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise ValueError(f"reward config file {str(path)!r} does not exist")
        text, default_name = path.read_text(), path.stem
    else:
        names = available_configs()
        if name_or_path not in names:
            raise ValueError(f"unknown reward config {name_or_path!r}; available: {names} "
                             f"(or pass a path to a YAML file)")
        root = resources.files(CONFIG_PACKAGE)
        entry = root / f"{name_or_path}.yaml"
        if not entry.is_file():
            entry = root / f"{name_or_path}.yml"
        text, default_name = entry.read_text(), name_or_path
    config = yaml.safe_load(text)
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError(f"reward config {name_or_path!r} must be a YAML mapping, got {type(config).__name__}")
    return config, default_name


def load_reward(name_or_path: str = "default", **overrides: Any) -> RewardFunction:
    """Build the reward a config describes; `overrides` replace keys of the file before validation."""
    config, default_name = _read(name_or_path)
    config.update(overrides)
    kind = config.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} in reward config {name_or_path!r} is not one of {sorted(KINDS)}")
    name = config.pop("name", None) or default_name
    return KINDS[kind](config, name=name)
