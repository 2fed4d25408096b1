import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x, weight, bias, stride, padding, group):
    """A (2*padding+1)-square convolution, zero padding `padding`, at stride 1 (bands of rows stay aligned
    only there), of an image whose rows are split into bands over the ranks of `group` (rank r holds rows
    r*H/W to (r+1)*H/W - 1).

    x (B, C, H/W, X), weight (C, C, k, k), bias (C,). An output row needs `padding` input rows above and
    below it: every rank sends its top `padding` rows to the rank above and its bottom rows to the rank
    below, receives theirs (the halo), and pads the image's outer edges with zeros. Returns this rank's
    band of the output, (B, C, H/W, X).
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    host_only = x.is_cuda and dist.get_backend(group) == "gloo"  # gloo's send/recv move host memory only
    edge = x.new_zeros(x.shape[0], x.shape[1], padding, x.shape[3])
    halo = {"above": edge, "below": edge}
    sends, receives = [], []
    for side, neighbour, rows in (("above", me - 1, x[:, :, :padding]), ("below", me + 1, x[:, :, -padding:])):
        if 0 <= neighbour < world:
            peer = dist.get_global_rank(group, neighbour)
            outgoing = rows.contiguous().cpu() if host_only else rows.contiguous()
            incoming = torch.empty_like(outgoing)
            sends.append(dist.P2POp(dist.isend, outgoing, peer, group))
            receives.append(dist.P2POp(dist.irecv, incoming, peer, group))
            halo[side] = incoming
    if sends:
        for request in dist.batch_isend_irecv(sends + receives):
            request.wait()
    padded = torch.cat([halo["above"].to(x.device), x, halo["below"].to(x.device)], dim=2)
    return F.conv2d(padded, weight, bias, stride=stride, padding=(0, padding))
