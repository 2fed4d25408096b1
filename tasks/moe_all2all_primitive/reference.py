import torch
import torch.distributed as dist


def solution(local_tensor: torch.Tensor, input_split_sizes: torch.Tensor, output_split_sizes: torch.Tensor,
             group: dist.ProcessGroup) -> torch.Tensor:
    """The all-to-all of an MoE token dispatcher, with the uneven splits of a top-k routing. Every rank of the
    group holds local_tensor (T * K, N): its T tokens' K (token, expert) pairs, already grouped by the rank
    holding each pair's expert, input_split_sizes[d] rows for group rank d, in rank order. output_split_sizes[s]
    is how many rows group rank s sends to this rank (the routing's counts, which agree across ranks: rank r's
    input_split_sizes[s] is rank s's output_split_sizes[r]; both int64 on the device). Every rank returns the
    rows it receives, (sum(output_split_sizes), N), grouped by source rank in rank order, each source's rows
    in the order it sent them."""
    world = dist.get_world_size(group)
    # One host read of both split lists: NCCL's all-to-all-v takes its sizes on the host (and the output's
    # size depends on them).
    sizes = torch.cat([input_split_sizes, output_split_sizes]).tolist()
    send, recv = sizes[:world], sizes[world:]
    output = local_tensor.new_empty((sum(recv), local_tensor.shape[1]))
    dist.all_to_all_single(output, local_tensor.contiguous(), recv, send, group=group)
    return output
