"""Rewards: pure, bounded functions of an EvaluationRecord (docs/architecture.md, "Rewards"), selected by
configs/rewards/*.yaml.

    from pkb_env.rewards import load_reward
    reward = load_reward("default")          # ShapedReward; "fast_1" for the binary fast_p metric
    result = reward(record)                  # RewardResult(value, terms)
"""
from .base import RewardFunction, RewardResult
from .fast_p import FastP
from .loader import KINDS, available_configs, load_reward
from .multiturn import TurnCredit, best_so_far, discounted_returns, improvement, turn_credits
from .shaped import ShapedReward

__all__ = ["RewardFunction", "RewardResult", "ShapedReward", "FastP", "KINDS", "available_configs",
           "load_reward", "TurnCredit", "discounted_returns", "best_so_far", "improvement", "turn_credits"]
