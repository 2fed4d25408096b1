import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x, weight, bias, stride, padding, dilation, groups, group):
    """A 3D convolution whose input channels are split over the ranks of `group` (tensor parallel over
    channels): rank r holds channels r*C/W to (r+1)*C/W - 1 of the video x (B, C/W, T, H, X) and the
    matching input-channel slice of the weight (O, C/W, 3, 3, 3). Each rank convolves its channels, an
    all-reduce sums the partial outputs, and the bias (O,) is added once. Every rank returns the whole
    output (B, O, T', H', X').
    """
    out = F.conv3d(x, weight, None, stride, padding, dilation, groups)
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
    return out + bias.view(1, -1, 1, 1, 1)
