"""Reward functions of an evaluation record (rewards/)."""
