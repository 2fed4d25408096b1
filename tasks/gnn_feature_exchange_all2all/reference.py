import torch
import torch.distributed as dist


@torch.no_grad()
def solution(local_features, seed_inverse_ids, group):
    """A GNN's feature exchange: every rank gathers the rows its peers asked for and sends them by all-to-all.

    local_features (W*R, H): this rank's node features; seed_inverse_ids (W*R,): which of them each
    requested row is. gathered = local_features[seed_inverse_ids] is cut into W chunks of R rows, and the
    chunks go round in rotated order (DGL's distributed sampler): rank r sends its chunk (j - r) mod W to
    rank j, and the chunk that arrives from rank j becomes chunk (j - r) mod W of the output. Returns
    (W*R, H).
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    chunks = local_features[seed_inverse_ids].chunk(world)
    outgoing = torch.cat([chunks[(j - me) % world] for j in range(world)])
    incoming = torch.empty_like(outgoing)
    dist.all_to_all_single(incoming, outgoing, group=group)
    arrived = incoming.chunk(world)  # arrived[j] came from rank j
    return torch.cat([arrived[(me + i) % world] for i in range(world)])
