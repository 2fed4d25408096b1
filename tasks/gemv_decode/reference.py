import torch
import torch.distributed as dist


def solution(hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The vocabulary-parallel LM head at decode time: hidden_states (B, D) is the batch's last hidden
    states, the same on every rank; weight (V, D) and bias (V,) are this rank's rows [r*V, (r+1)*V) of the
    head. Each rank computes its logits, hidden_states @ weight.T + bias (B, V), and the ranks gather them
    along the vocabulary. Returns the full logits (B, W*V), the same on every rank."""
    local = hidden_states @ weight.t() + bias
    blocks = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(blocks, local.contiguous())
    return torch.cat(blocks, dim=1)
