"""Credit assignment across the turns of one multi-turn episode (refine the kernel after feedback).

Pure functions over the per-turn rewards, so the env and offline analysis compute the same numbers.
Kevin (Cognition, 2025) trained with discounted returns, gamma ~ 0.4: each turn is credited with its own
score plus the discounted scores of the turns it led to, so an attempt that sets up a later fix is
rewarded without letting distant turns dominate.
"""
from __future__ import annotations

import enum
from typing import Sequence


class TurnCredit(str, enum.Enum):
    """What a turn is credited with.

    TURN: the reward of this turn's answer, independent of history.
    IMPROVEMENT: max(0, r - best previous reward): only progress pays, so repeating a good answer earns
    nothing; the first turn (no previous) is credited with its own reward, which makes the credits of an
    episode sum to its best reward.
    """

    TURN = "turn"
    IMPROVEMENT = "improvement"


def _check_gamma(gamma: float) -> float:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: {gamma} must be in [0, 1]")
    return float(gamma)


def discounted_returns(rewards: Sequence[float], gamma: float = 0.4) -> list[float]:
    """G_t = r_t + gamma * G_{t+1} (G after the last turn is 0): Kevin-style per-turn returns."""
    gamma = _check_gamma(gamma)
    returns: list[float] = []
    running = 0.0
    for r in reversed(rewards):
        running = float(r) + gamma * running
        returns.append(running)
    return returns[::-1]


def best_so_far(rewards: Sequence[float]) -> list[float]:
    """Running maximum: what the episode has achieved by each turn (the episode's score is the last)."""
    best: list[float] = []
    for r in rewards:
        best.append(float(r) if not best else max(best[-1], float(r)))
    return best


def improvement(reward: float, best_previous: float | None) -> float:
    """One turn's IMPROVEMENT credit; best_previous None means this is the first turn."""
    return float(reward) if best_previous is None else max(0.0, float(reward) - float(best_previous))


def turn_credits(rewards: Sequence[float], mode: TurnCredit | str = TurnCredit.TURN) -> list[float]:
    """Per-turn credit for a whole episode under `mode` (a TurnCredit or its string value)."""
    try:
        mode = TurnCredit(mode)
    except ValueError:
        raise ValueError(f"mode: {mode!r} is not one of {[m.value for m in TurnCredit]}") from None
    if mode is TurnCredit.TURN:
        return [float(r) for r in rewards]
    previous = [None, *best_so_far(rewards)[:-1]] if rewards else []
    return [improvement(r, b) for r, b in zip(rewards, previous)]
