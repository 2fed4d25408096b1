import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(image_features, text_features, logit_scale, logit_bias, group):
    """OpenCLIP's SigLIP loss over a batch split across the ranks of `group`, text passed around a ring.

    image_features, text_features (M/W, N): this rank's M/W image-text pairs (row i of both is a matching
    pair) of a global batch of M, rows L2-normalised. In fp32 (the dot products accumulated in fp32, never
    rounded to the features' dtype): logits = logit_scale * image @ text^T + logit_bias for this rank's images
    against the texts of every rank; label +1 for an image's own text (the diagonal of the global batch),
    -1 for every other text; loss = -sum(logsigmoid(label * logits)) / (M/W), the sum over this rank's
    images and all M texts, divided by the local batch size. The text blocks travel around the ring in both
    directions at once (OpenCLIP's bidirectional neighbour exchange): (W-1)//2 steps receive one block from
    each neighbour and pass it on, and where W is even a last step receives the one block still missing
    from the left. Returns this rank's loss, a 0-dim fp32 tensor (ranks' losses differ).
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    left, right = dist.get_global_rank(group, (me - 1) % world), dist.get_global_rank(group, (me + 1) % world)
    host_only = text_features.is_cuda and dist.get_backend(group) == "gloo"  # gloo's send/recv move host memory
    images = image_features.float()

    def block_loss(texts, own):
        """The summed loss of this rank's images against one block of texts; `own`: the rank's own texts,
        whose diagonal holds the positive pairs."""
        logits = logit_scale * (images @ texts.float().T) + logit_bias
        labels = -torch.ones_like(logits)
        if own:
            labels.diagonal().fill_(1.0)
        return -F.logsigmoid(labels * logits).sum()

    def post(sends, sources):
        """Start one ring step: send each (block, peer) and receive one block from each source rank."""
        outgoing = [(block.cpu() if host_only else block, peer) for block, peer in sends]
        incoming = [torch.empty_like(outgoing[0][0]) for _ in sources]
        ops = ([dist.P2POp(dist.isend, block, peer, group) for block, peer in outgoing]
               + [dist.P2POp(dist.irecv, block, peer, group) for block, peer in zip(incoming, sources)])
        return dist.batch_isend_irecv(ops), incoming

    bidirectional, one_way = divmod(world - 1, 2)
    to_left = to_right = text_features
    at_hand = [(text_features, True)]  # text blocks whose loss is still to be added
    loss = torch.zeros((), dtype=torch.float32, device=image_features.device)
    for step in range(bidirectional + one_way):
        if step < bidirectional:  # to both neighbours, from both
            requests, incoming = post([(to_right, right), (to_left, left)], [left, right])
        else:  # even W: the block opposite this rank arrives from the left
            requests, incoming = post([(to_right, right)], [left])
        for texts, own in at_hand:  # while the blocks travel
            loss += block_loss(texts, own)
        for request in requests:
            request.wait()
        received = [block.to(text_features.device) for block in incoming]
        at_hand = [(block, False) for block in received]
        if step < bidirectional:  # pass each block on in the direction it travels
            to_right, to_left = received
    for texts, own in at_hand:
        loss += block_loss(texts, own)
    return loss / image_features.shape[0]
