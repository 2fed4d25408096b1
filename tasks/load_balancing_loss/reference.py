import torch
import torch.distributed as dist


def solution(gate_logits: torch.Tensor, num_experts: int, top_k: int) -> torch.Tensor:
    """The auxiliary load-balancing loss of a mixture-of-experts router (Switch Transformer, Mixtral),
    averaged over data-parallel ranks. Every rank holds the router logits of its own M tokens,
    gate_logits (M, E). On each rank, with p = softmax(gate_logits) computed in fp32 and each token routed
    to the top_k experts of its logits (ties go to the lower expert index):
    loss_r = E * sum_e (tokens routed to e / M) * (mean over tokens of p_e). Every rank returns the mean
    over ranks of loss_r, a 0-dim fp32 tensor."""
    logits = gate_logits.float()
    probs = logits.softmax(dim=-1)
    chosen = logits.sort(dim=-1, descending=True, stable=True).indices[:, :top_k]
    routed = torch.bincount(chosen.flatten(), minlength=num_experts).float() / logits.shape[0]
    loss = num_experts * (routed * probs.mean(dim=0)).sum()
    dist.all_reduce(loss)
    return loss / dist.get_world_size()
