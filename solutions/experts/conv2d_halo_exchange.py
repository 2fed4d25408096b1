"""Row-split 3x3 convolution: halo rows read from the neighbours' symmetric buffers, the exchange hidden
behind the band's own convolution.

Every call:
  main stream  the band's convolution with zero padding on all four sides, at once: it needs no halo, and
               every output row but the band's first and last `padding` rows is already final;
  side stream  (high priority, concurrently) publish the band's top and bottom `padding` rows in this
               rank's symmetric buffer; one stream-ordered barrier; copy the bottom rows of the rank above
               and the top rows of the rank below straight from their buffers (over NVLink) into strips
               of 3 * padding rows, [halo; first 2p rows] and [last 2p rows; halo] (a rank at the image's
               edge has one strip: zero padding makes the main output's rows on that side final); one
               convolution of the strips as a batch gives the band's first and/or last `padding` output
               rows; once the main convolution is done, they overwrite its rows.
Both convolutions are cuDNN's (torch.nn.functional.conv2d), fp32 accumulation, one rounding per output as
in the reference. Why it beats the reference: no NCCL send/receive (a barrier and two row copies), no
concatenation of the whole band with its halos (the main convolution reads the input in place), and the
exchange overlaps the convolution instead of preceding it. The cost: the boundary rows next to a
neighbour (2 * padding rows, `padding` at the image's edge) are computed twice, the second time by a small
convolution of their 3p-row strips.

The buffer has two slots (call i publishes into slot i % 2), so no barrier follows the reads: a rank writes
a slot again two calls later, after a barrier its neighbours reach only once their reads of that slot are
done (their reads and barriers are on one stream). The side stream is joined to the caller's stream before
`solution` returns.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_env.runtime import symmetric_buffer

_state = {}


def halo_sources(rank, world):
    """(the rank whose bottom rows are this rank's top halo, the rank whose top rows are its bottom halo);
    None at the image's edges (zero padding)."""
    return (rank - 1 if rank > 0 else None, rank + 1 if rank + 1 < world else None)


def boundary_rows(strips, weight, bias, padding):
    """The band's boundary output rows, (S, B, C, p, X), from S strips (S, B, C, 3p, X): strip 0 is the top
    halo over the band's first 2p rows (its output: the first p rows), strip 1 the band's last 2p rows over
    the bottom halo (the last p rows)."""
    two, b, c, rows, width = strips.shape
    out = F.conv2d(strips.view(two * b, c, rows, width), weight, bias, stride=1, padding=(0, padding))
    return out.view(two, b, out.shape[1], padding, width)


def _resources(x, group, padding):
    """The cached buffer (2 slots x [top rows; bottom rows]), its peers' views, the strips, the side stream
    and its events for this shape; made once (the buffer's rendezvous is collective)."""
    key = (tuple(x.shape), x.dtype, padding, id(group))
    if key not in _state:
        b, c, _, width = x.shape
        buf = symmetric_buffer((2, 2, b, c, padding, width), x.dtype, tag="expert_conv2d_halo_exchange", group=group)
        strips = torch.zeros((2, b, c, 3 * padding, width), dtype=x.dtype, device=x.device)
        _state[key] = {
            "buf": buf,
            "peers": [buf.peer(p) for p in range(buf.world_size)],
            "strips": strips,
            "side": torch.cuda.Stream(device=x.device, priority=-1),
            "start": torch.cuda.Event(),
            "main_done": torch.cuda.Event(),
            "done": torch.cuda.Event(),
            "calls": 0,
        }
    return _state[key]


@torch.no_grad()
def solution(x, weight, bias, stride, padding, group):
    if stride != 1:
        raise ValueError(f"conv2d_halo_exchange expert: stride 1 only (bands stay aligned only there), got {stride}")
    group = group if group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    p = padding
    h = x.shape[2]
    if world == 1 or p == 0:
        return F.conv2d(x, weight, bias, stride=1, padding=p)
    if h < 2 * p:
        raise ValueError(f"conv2d_halo_exchange expert: a band of {h} rows is thinner than twice the halo ({p})")

    res = _resources(x, group, p)
    buf, strips, side = res["buf"], res["strips"], res["side"]
    above, below = halo_sources(buf.rank, world)
    slot = res["calls"] % 2
    res["calls"] += 1
    main = torch.cuda.current_stream()
    res["start"].record(main)              # the inputs are ready
    side.wait_event(res["start"])
    # the strips with a neighbour: 0 (top) and/or 1 (bottom); at the image's edge the main output is final
    first, last = (0 if above is not None else 1), (1 if below is not None else 0)
    with torch.cuda.stream(side):
        buf.local[slot, 0].copy_(x[:, :, :p])       # publish this band's top rows ...
        buf.local[slot, 1].copy_(x[:, :, h - p:])   # ... and its bottom rows
        if above is not None:
            strips[0, :, :, p:].copy_(x[:, :, :2 * p])
        if below is not None:
            strips[1, :, :, :2 * p].copy_(x[:, :, h - 2 * p:])
        buf.barrier()                                # every rank's rows are published
        if above is not None:
            strips[0, :, :, :p].copy_(res["peers"][above][slot, 1])   # over NVLink
        if below is not None:
            strips[1, :, :, 2 * p:].copy_(res["peers"][below][slot, 0])
        rows = boundary_rows(strips[first:last + 1], weight, bias, p)

    out = F.conv2d(x, weight, bias, stride=1, padding=p)   # every row but the boundary rows is final
    res["main_done"].record(main)
    with torch.cuda.stream(side):
        side.wait_event(res["main_done"])
        for k, strip in enumerate(range(first, last + 1)):
            target = out[:, :, :p] if strip == 0 else out[:, :, h - p:]
            target.copy_(rows[k])
        res["done"].record(side)
    main.wait_event(res["done"])
    return out
