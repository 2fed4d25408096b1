import torch
import torch.distributed as dist


def solution(expert_outputs: torch.Tensor, routing_weights: torch.Tensor, selected_experts: torch.Tensor,
             num_experts: int, input_splits: torch.Tensor, output_splits: torch.Tensor,
             num_global_tokens_per_local_expert: torch.Tensor, routing_map: torch.Tensor,
             local_input_permutation_mapping: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """MoE combine after the experts (Megatron-LM's all-to-all dispatcher, the way back). Every rank of the
    group holds its T tokens' routing: selected_experts (T, K) int64 (E = num_experts experts placed
    contiguously, E / W per rank) with routing_weights (T, K); routing_map (E, T) bool (token t picked expert
    e); local_input_permutation_mapping (T * K,) int64, the token of each of its pairs expert-major (for
    e = 0..E-1, the tokens that picked e, in token order); and the routing's counts, int64 on the device:
    input_splits (W,), its pairs for each rank; output_splits (W,), the pairs each rank sent here;
    num_global_tokens_per_local_expert (W, E / W), those per local expert. expert_outputs is a buffer sized
    for the most pairs a rank can receive: its first sum(output_splits) rows are this rank's experts' outputs,
    grouped by local expert, then source rank, each source's in its expert-major order (the dispatch's
    layout); the rows after them are not outputs. Every rank sends each pair's output back to the rank that
    sent the pair (one all-to-all-v) and returns its tokens combined, (T, N): row t = sum over k of
    routing_weights[t, k] * the output of expert selected_experts[t, k] for token t."""
    world = dist.get_world_size(group)
    local_experts = num_experts // world
    tokens, hidden = routing_map.shape[1], expert_outputs.shape[1]
    # One host read of every count: NCCL's all-to-all-v takes its sizes on the host, and so does the split
    # into chunks.
    sizes = torch.cat([input_splits, output_splits, num_global_tokens_per_local_expert.T.flatten()]).tolist()
    back, sent, chunk_sizes = sizes[:world], sizes[world:2 * world], sizes[2 * world:]
    chunks = expert_outputs[:sum(sent)].split(chunk_sizes)          # expert-major: chunk l * W + s
    by_source = torch.cat([chunks[expert * world + s] for s in range(world) for expert in range(local_experts)])
    returned = expert_outputs.new_empty((sum(back), hidden))
    dist.all_to_all_single(returned, by_source, back, sent, group=group)
    # returned holds this rank's pairs in expert-major order: weigh each by its pick's weight, add per token.
    weights = routing_weights.new_zeros((tokens, num_experts)).scatter(1, selected_experts, routing_weights)
    pair_weights = weights.T.masked_select(routing_map)
    combined = expert_outputs.new_zeros((tokens, hidden))
    combined.index_add_(0, local_input_permutation_mapping, returned * pair_weights.unsqueeze(1))
    return combined
