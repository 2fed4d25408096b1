import torch
import torch.distributed as dist


@torch.no_grad()
def solution(grad_output, seed_inverse_ids, num_local, group):
    """Backward of the GNN feature exchange: send every gradient row back to the rank that owns its node and
    accumulate it into that node's gradient.

    grad_output (W*R, H): the gradient of this rank's exchanged features, chunk i from rank (r + i) mod W in
    the forward; seed_inverse_ids (W*R,): which local node each row this rank gathered in the forward was
    (repeats allowed); num_local: this rank's node count. The chunks go back by the same rotated all-to-all
    (rank r sends its chunk (j - r) mod W to rank j, and what rank j sends becomes chunk (j - r) mod W),
    then every returned row is added into row seed_inverse_ids[k] of a zero (num_local, H) gradient.
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    chunks = grad_output.chunk(world)
    outgoing = torch.cat([chunks[(j - me) % world] for j in range(world)])
    incoming = torch.empty_like(outgoing)
    dist.all_to_all_single(incoming, outgoing, group=group)
    arrived = incoming.chunk(world)  # arrived[j] came from rank j
    returned = torch.cat([arrived[(me + i) % world] for i in range(world)])
    grad_local = torch.zeros(num_local, grad_output.shape[1], dtype=grad_output.dtype, device=grad_output.device)
    return grad_local.index_add_(0, seed_inverse_ids, returned)
