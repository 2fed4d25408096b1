import torch
import torch.distributed as dist


@torch.no_grad()
def solution(key_splits, lengths, values, group):
    """TorchRec's KeyedJaggedTensor all-to-all (sparse features to the ranks that hold their tables).

    key_splits (W,): rank d owns the next key_splits[d] features (F in all, contiguous, rank 0's first);
    lengths (F * B,): this rank's jagged lengths, feature-major (feature f's B bags, B this rank's batch,
    which differs by rank and by call); values: every bag's ids in the same order. Every rank returns the
    KJT of its own features over every rank's batch, as a dict: "lengths" and "values" feature-major, then
    by source rank, then bag; "stride" the total batch (0-dim); "stride_per_rank" each rank's batch (W,).
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    splits = key_splits.tolist()
    batch = lengths.numel() // sum(splits)
    per_feature = lengths.view(-1, batch).sum(dim=1)
    values_to = torch.stack([part.sum() for part in per_feature.split(splits)])
    meta = torch.stack([torch.full_like(values_to, batch), values_to], dim=1)  # (W, 2): batch, values
    peer_meta = torch.empty_like(meta)
    dist.all_to_all_single(peer_meta, meta, group=group)
    strides, values_from = peer_meta[:, 0].tolist(), peer_meta[:, 1].tolist()
    mine = splits[me]
    recv_lengths = lengths.new_empty(mine * sum(strides))
    dist.all_to_all_single(recv_lengths, lengths, [mine * b for b in strides], [k * batch for k in splits],
                           group=group)
    recv_values = values.new_empty(sum(values_from))
    dist.all_to_all_single(recv_values, values, values_from, values_to.tolist(), group=group)
    # what arrived is source-major (rank, feature, bag): put it feature-major (feature, rank, bag)
    by_source = [part.view(mine, b) for part, b in zip(recv_lengths.split([mine * b for b in strides]), strides)]
    out_lengths = torch.cat(by_source, dim=1).flatten()
    segment = torch.stack([part.sum(dim=1) for part in by_source]).flatten()  # (W * mine,) source-major
    key = (torch.arange(mine, device=lengths.device)[None, :] * world
           + torch.arange(world, device=lengths.device)[:, None]).flatten()
    order = torch.sort(key.repeat_interleave(segment), stable=True).indices
    return {"lengths": out_lengths, "values": recv_values[order],
            "stride": peer_meta[:, 0].sum(), "stride_per_rank": peer_meta[:, 0].clone()}
