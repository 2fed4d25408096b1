import torch
import torch.distributed as dist

from pkb_env.tasks.moe_post_all2all.reference import solution as combine


def solution(expert_outputs: torch.Tensor, routing_weights: torch.Tensor, selected_experts: torch.Tensor,
             num_experts: int, input_splits: torch.Tensor, output_splits: torch.Tensor,
             num_global_tokens_per_local_expert: torch.Tensor, routing_map: torch.Tensor,
             local_input_permutation_mapping: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """PKB 29 as PKB states it (tasks/moe_post_all2all/pkb/spec.py): the task's combine, which moves rows by the
    counts it is given (PKB's equal ones here: expert_outputs holds exactly the sum(output_splits) rows it reads)."""
    return combine(expert_outputs, routing_weights, selected_experts, num_experts, input_splits, output_splits,
                   num_global_tokens_per_local_expert, routing_map, local_input_permutation_mapping, group)
