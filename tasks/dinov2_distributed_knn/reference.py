import torch
import torch.distributed as dist


@torch.no_grad()
def solution(test_features_rank, train_features_rank_T, train_labels_rank, max_k, group):
    """DINOv2's k-NN evaluation with the training set split over the ranks of `group`: every rank finds, for
    its own test features, the max_k most similar training features over every rank's shard.

    test_features_rank (Q, D): this rank's queries; train_features_rank_T (D, L): this rank's block of the
    training features, transposed (block r holds global training indices r*L .. r*L + L - 1);
    train_labels_rank (1, L) int64. Similarity is the dot product, computed in float32 (the features are
    small integers, so every similarity is an exact integer). Order: higher similarity first; equal
    similarities by the lower global training index. Returns (sims (Q, max_k) float32, labels (Q, max_k)
    int64) for this rank's queries.
    """
    world = dist.get_world_size(group)
    queries = test_features_rank.new_empty((world * test_features_rank.shape[0], test_features_rank.shape[1]))
    dist.all_gather_into_tensor(queries, test_features_rank.contiguous(), group=group)
    sims = queries.float() @ train_features_rank_T.float()                     # (W*Q, L), every rank's queries
    # a stable descending sort keeps equal similarities in column order: the lower global index first
    order = torch.sort(sims, dim=1, descending=True, stable=True).indices[:, :max_k]
    top = sims.gather(1, order)
    labels = train_labels_rank[0][order]
    # every rank's candidates for my queries, rank-major (so global indices ascend rank by rank)
    got_sims, got_labels = torch.empty_like(top), torch.empty_like(labels)
    dist.all_to_all_single(got_sims, top, group=group)
    dist.all_to_all_single(got_labels, labels, group=group)
    queries_here = test_features_rank.shape[0]
    cand_sims = got_sims.view(world, queries_here, max_k).transpose(0, 1).reshape(queries_here, world * max_k)
    cand_labels = got_labels.view(world, queries_here, max_k).transpose(0, 1).reshape(queries_here, world * max_k)
    pick = torch.sort(cand_sims, dim=1, descending=True, stable=True).indices[:, :max_k]
    return cand_sims.gather(1, pick), cand_labels.gather(1, pick)
