import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(hidden_states: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
             w_gate: torch.Tensor, b_gate: torch.Tensor, w_up: torch.Tensor, b_up: torch.Tensor,
             w_down: torch.Tensor, b_down: torch.Tensor, num_experts: int, group) -> torch.Tensor:
    """Expert-parallel MoE forward (Megatron-LM's all-to-all token dispatcher). This rank holds its tokens,
    hidden_states (M, N), each token's top-k experts topk_idx (M, K) and gate weights topk_weights (M, K,
    fp32), and the SwiGLU MLPs of its experts: the num_experts experts of the expert-parallel group `group`
    sit contiguously on its ranks, expert e on group rank e // (num_experts / group size), as local expert
    e % (num_experts / group size) of w_gate, b_gate, w_up, b_up (gate and up projections N -> I), w_down
    and b_down (down projection I -> N). Expert e maps a row x to
    down_e(silu(gate_e(x)) * up_e(x)), each projection an nn.Linear (x @ w.T + b). Returns (M, N): for every
    token, the sum over its K picks of gate weight times its expert's output.
    Here num_experts equals the world size: one expert per rank."""
    ranks, me = dist.get_world_size(group), dist.get_rank(group)
    local = num_experts // ranks
    k = topk_idx.shape[1]
    # Permute: one row per (token, pick), sorted by expert, token order within an expert.
    expert = topk_idx.flatten()
    order = torch.argsort(expert, stable=True)
    token = order // k
    # Counts: every rank's pairs per expert, gathered over the group; this rank receives its experts' columns.
    counts = torch.bincount(expert, minlength=num_experts)
    every = counts.new_empty(ranks * num_experts)
    dist.all_gather_into_tensor(every, counts, group=group)
    mine = every.view(ranks, num_experts)[:, me * local:(me + 1) * local]        # (source rank, local expert)
    sizes = torch.cat([counts.view(ranks, local).sum(1), mine.sum(1), mine.sum(0)]).tolist()  # one host sync
    send, recv, per_expert = sizes[:ranks], sizes[ranks:2 * ranks], sizes[2 * ranks:]
    # Dispatch: rows arrive source by source, each source's rows expert by expert.
    received = hidden_states.new_empty((sum(recv), hidden_states.shape[1]))
    dist.all_to_all_single(received, hidden_states[token], recv, send, group=group)
    # Experts: regroup the rows expert by expert, run each local expert's MLP, restore the arrival order.
    which = torch.arange(local, device=received.device).repeat(ranks)
    which = which.repeat_interleave(mine.flatten(), output_size=len(received))
    by_expert = torch.argsort(which, stable=True)
    results = []
    for j, x in enumerate(received[by_expert].split(per_expert)):
        h = F.silu(F.linear(x, w_gate[j], b_gate[j])) * F.linear(x, w_up[j], b_up[j])
        results.append(F.linear(h, w_down[j], b_down[j]))
    done = torch.empty_like(received)
    done[by_expert] = torch.cat(results)
    # Combine: results back to their tokens' ranks, weighted by the gate and summed over each token's picks.
    back = hidden_states.new_empty((sum(send), hidden_states.shape[1]))
    dist.all_to_all_single(back, done, send, recv, group=group)
    out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
    out.index_add_(0, token, back.float() * topk_weights.flatten()[order, None])
    return out.to(hidden_states.dtype)
