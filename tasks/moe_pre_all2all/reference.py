import torch
import torch.distributed as dist


def solution(hidden_states: torch.Tensor, expert_mask: torch.Tensor, num_experts: int, input_splits: torch.Tensor,
             output_splits: torch.Tensor, num_global_tokens_per_local_expert: torch.Tensor,
             group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE token dispatch before the experts (Megatron-LM's all-to-all dispatcher). Every rank of the group
    holds hidden_states (T, N), its T tokens, and expert_mask (E, K, T), their top-K picks one-hot
    (expert_mask[e, k, t] = 1 where token t's k-th pick is expert e; E = num_experts, placed contiguously,
    E / W per rank). The routing's counts, int64 on the device: input_splits (W,), this rank's (token, expert)
    pairs for each rank; output_splits (W,), the pairs each rank sends here; and
    num_global_tokens_per_local_expert (W, E / W), the pairs each rank sends to each of this rank's experts.
    Every rank:
    1. permutes its tokens expert-major: for e = 0..E-1, the rows of the tokens that picked e, in token order;
    2. sends each rank the pairs for its experts (one all-to-all-v), receiving rows grouped by source rank,
       each source's in its expert-major order;
    3. regroups them by local expert, then source rank (each expert's rows contiguous for its GEMM).
    It returns (the regrouped rows (sum(output_splits), N), routing_map (E, T) bool = token t picked expert e,
    and the permutation: the token index of each of its T * K pairs in the order of step 1, int64)."""
    world = dist.get_world_size(group)
    local_experts = num_experts // world
    routing_map = expert_mask.sum(dim=1).bool()
    tokens = torch.arange(routing_map.shape[1], device=routing_map.device).expand_as(routing_map)
    permutation = tokens.masked_select(routing_map)
    permuted = hidden_states.index_select(0, permutation)
    # One host read of every count: NCCL's all-to-all-v takes its sizes on the host, and so does the split
    # into chunks.
    sizes = torch.cat([input_splits, output_splits, num_global_tokens_per_local_expert.flatten()]).tolist()
    send, recv, chunk_sizes = sizes[:world], sizes[world:2 * world], sizes[2 * world:]
    received = hidden_states.new_empty((sum(recv), hidden_states.shape[1]))
    dist.all_to_all_single(received, permuted, recv, send, group=group)
    chunks = received.split(chunk_sizes)                   # source-major: chunk s * E/W + l
    regrouped = torch.cat([chunks[s * local_experts + expert] for expert in range(local_experts)
                           for s in range(world)])
    return regrouped, routing_map, permutation
