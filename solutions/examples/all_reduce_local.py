"""A wrong all_reduce: no communication at all, each rank returns its own tensor. For the toy candidate
sets of the dataset tests and agents/expert_iteration.py --tiny."""
import torch


def solution(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.clone()
