"""All-gather + GEMM over symmetric memory: the gather hidden behind the GEMM when it is worth hiding.

Every rank publishes its A (M, K/W) in its symmetric buffer; a stream-ordered barrier says every rank has.

Large blocks (a peer's block above CHUNK_BYTES), split-K over the ranks' blocks with the transfers hidden:
out = A_full @ B = sum over ranks p of A_p @ B[p-th K-block]. A rank starts with the one term it has,
A_own @ B[own block], at once; meanwhile a high-priority side stream publishes A_own, passes the barrier
and pulls the peers' blocks with copy-engine copies (no SMs taken from the GEMM), in row chunks, each
signalled by an event. The main stream adds each peer's term as its chunk lands: `out[rows].addmm_(A_p[rows],
B[p-th K-block])`, which cuBLAS computes in float32 and rounds once per term (the task's split-K tolerance
allows W rounded partial products).

Small blocks (PKB's bench size), where a launch costs more than the transfer: no side stream, four
operations on the caller's stream: publish, barrier, one `torch.cat` that reads the peers' blocks straight
from their buffers over NVLink into A_full, one GEMM.

Why it beats the reference: the reference waits for an NCCL all-gather into a list, concatenates, then
multiplies; here the transfer overlaps the first GEMM term (large) or the gather is one kernel with no
NCCL call (small).

Buffers are reused across calls without a trailing barrier: the buffer has two slots and call i publishes
into slot i % 2, so a rank overwrites a slot only two calls later, after a barrier its peers reach only
once their reads of that slot are done (their reads and barriers share one stream). Every side-stream
operation is joined to the caller's stream before `solution` returns.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import symmetric_buffer

CHUNK_BYTES = 8 << 20   # a peer block larger than this arrives in row chunks, overlapped with the GEMM
MAX_CHUNKS = 4
_state = {}


# -- the math (also run on CPU tensors by the tests) ------------------------------------------------------

def peer_order(rank, world):
    """The peers in the order this rank pulls them: the next rank first, so that at any moment the ranks
    read from different peers."""
    return [(rank + step) % world for step in range(1, world)]


def row_chunks(rows, row_bytes):
    """Row ranges [begin, end) a peer block arrives in: one range for small blocks, up to MAX_CHUNKS."""
    count = max(1, min(MAX_CHUNKS, rows, (rows * row_bytes) // CHUNK_BYTES))
    step = -(-rows // count)
    return [(begin, min(begin + step, rows)) for begin in range(0, rows, step)]


def k_block(B, p, width):
    """Rows of this rank's weight B (K, N) that multiply rank p's K-block of the activations."""
    return B[p * width:(p + 1) * width]


def gemm_of_blocks(blocks, B, rank, world):
    """What `solution` computes, from every rank's block at hand: one GEMM of the concatenated blocks
    (small blocks), or A_own @ B_own followed by each peer's term in `peer_order`, chunk by chunk."""
    a = blocks[rank]
    width = a.shape[1]
    chunks = row_chunks(a.shape[0], width * a.element_size())
    if len(chunks) == 1:
        return torch.cat(blocks, dim=1) @ B
    out = torch.mm(a, k_block(B, rank, width))
    for p in peer_order(rank, world):
        for begin, end in chunks:
            out[begin:end].addmm_(blocks[p][begin:end], k_block(B, p, width))
    return out


# -- data movement -------------------------------------------------------------------------------------

def _resources(A, world):
    """The cached buffer (2 slots of A's shape), views of it and of the peers' buffers, the staging blocks,
    the side stream and the events, for this shape; made once (the buffer's rendezvous is collective)."""
    key = (tuple(A.shape), A.dtype)
    if key not in _state:
        buf = symmetric_buffer((2, A.numel()), A.dtype, tag="expert_allgather_gemm")
        chunks = row_chunks(A.shape[0], A.shape[1] * A.element_size())
        pipelined = len(chunks) > 1
        _state[key] = {
            "buf": buf,
            "chunks": chunks,
            "own": [buf.local[s].view(A.shape) for s in range(2)],
            "theirs": [[buf.peer(p)[s].view(A.shape) for p in range(world)] for s in range(2)],
            "stage": torch.empty((world - 1, *A.shape), dtype=A.dtype, device=A.device) if pipelined else None,
            "side": torch.cuda.Stream(device=A.device, priority=-1) if pipelined else None,
            "start": torch.cuda.Event(),
            "pulled": [[torch.cuda.Event() for _ in chunks] for _ in range(world - 1)],
            "calls": 0,
        }
    return _state[key]


def solution(A, B):
    world = dist.get_world_size()
    if world == 1:
        return A @ B
    res = _resources(A, world)
    buf, slot = res["buf"], res["calls"] % 2
    res["calls"] += 1
    rank = buf.rank
    theirs = res["theirs"][slot]
    if res["side"] is None:            # small: publish, barrier, gather by one cat over NVLink, one GEMM
        res["own"][slot].copy_(A)
        buf.barrier()                  # every rank's block is in its slot
        return torch.cat([A if p == rank else theirs[p] for p in range(world)], dim=1) @ B

    stage, side, chunks = res["stage"], res["side"], res["chunks"]
    width = A.shape[1]
    order = peer_order(rank, world)
    main = torch.cuda.current_stream()
    res["start"].record(main)          # A is ready, and the previous call's GEMMs (readers of stage) are queued
    side.wait_event(res["start"])
    with torch.cuda.stream(side):
        res["own"][slot].copy_(A)
        buf.barrier()                  # every rank's block is in its slot
        for j, p in enumerate(order):
            for c, (begin, end) in enumerate(chunks):
                stage[j, begin:end].copy_(theirs[p][begin:end])   # copy engine, over NVLink
                res["pulled"][j][c].record(side)

    out = torch.mm(A, k_block(B, rank, width))
    for j, p in enumerate(order):
        weight = k_block(B, p, width)
        for c, (begin, end) in enumerate(chunks):
            main.wait_event(res["pulled"][j][c])
            out[begin:end].addmm_(stage[j, begin:end], weight)
    return out
