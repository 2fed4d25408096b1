import torch
import torch.distributed as dist


def solution(expert_mask: torch.Tensor, num_experts: int,
             group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE dispatch preprocessing (Megatron-LM's all-to-all dispatcher): the split sizes and per-expert counts
    the dispatch all-to-all and the experts' grouped GEMM need. Every rank of the group holds expert_mask
    (E, K, T), its T tokens' top-K picks one-hot (expert_mask[e, k, t] = 1 where token t's k-th pick is expert
    e; E = num_experts, placed contiguously, E / W per rank). Counting (token, expert) pairs, every rank returns,
    int64 on its device:
    - input_splits (W,): its pairs for each rank's experts;
    - output_splits (W,): the pairs each rank has for its experts;
    - num_global_tokens_per_local_expert (W, E / W): [s, l], rank s's pairs for its l-th expert;
    - num_global_sum_tokens_per_local_expert (E / W,): the pairs for each of its experts from all ranks."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    local_experts = num_experts // world
    per_expert = expert_mask.sum(dim=(1, 2))                        # (E,): this rank's pairs per expert
    input_splits = per_expert.view(world, local_experts).sum(dim=1)
    every_rank = per_expert.new_empty((world * num_experts,))
    dist.all_gather_into_tensor(every_rank, per_expert, group=group)
    per_local_expert = every_rank.view(world, num_experts)[:, rank * local_experts:(rank + 1) * local_experts].contiguous()
    return input_splits, per_local_expert.sum(dim=1), per_local_expert, per_local_expert.sum(dim=0)
