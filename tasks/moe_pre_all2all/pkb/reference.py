import torch
import torch.distributed as dist

from pkb_env.tasks.moe_pre_all2all.reference import solution as dispatch


def solution(hidden_states: torch.Tensor, expert_mask: torch.Tensor, num_experts: int, input_splits: torch.Tensor,
             output_splits: torch.Tensor, num_global_tokens_per_local_expert: torch.Tensor,
             group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PKB 28 as PKB states it (tasks/moe_pre_all2all/pkb/spec.py): the task's dispatch, which moves rows by the
    counts it is given (PKB's equal ones here), with PKB's float32 routing map."""
    permuted, _, permutation = dispatch(hidden_states, expert_mask, num_experts, input_splits, output_splits,
                                        num_global_tokens_per_local_expert, group)
    return permuted, expert_mask.sum(dim=1), permutation
