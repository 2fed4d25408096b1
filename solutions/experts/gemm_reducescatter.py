"""GEMM + reduce-scatter over symmetric memory: the reduction hidden behind the GEMM when it is worth hiding.

Rank r's output is row block r of sum over ranks p of A_p @ B_p; every rank's partial products go to its
symmetric buffer, where the rank that owns those rows reads them.

Large partials (a destination's block above CHUNK_BYTES): the main stream computes the partial products
the PEERS need first, destination by destination (rank r+1's rows, then r+2's, ...), each in row chunks,
into this rank's buffer; after each chunk an event lets a high-priority side stream pass a stream-ordered
barrier (every rank has made the chunk of that step) and pull, by copy engine, the chunk its own rows got
from the matching peer, straight into the output. Last, the main stream computes its own rows chunk by
chunk, adding them to the pulled partials in the GEMM's epilogue: `out.addmm_(A_own_rows, B)` (beta = 1,
float32 accumulation, one rounding per term, as the task's split-K tolerance allows).

Small partials (PKB's bench size), where a launch costs more than the transfer: no side stream, three
operations on the caller's stream: the whole partial product into the buffer, a barrier, and one add that
reads this rank's rows of every rank's partial over NVLink (float32 accumulation, one rounding).

Why it beats the reference: the reference finishes the whole (M, N) GEMM before an NCCL reduce-scatter
starts; here the transfers overlap the GEMM and the reduction costs no pass of its own (large), or the
reduce-scatter is one elementwise kernel with no NCCL call (small).

Buffers are reused across calls without a trailing barrier: the buffer has two slots and call i writes
slot i % 2, so a rank overwrites a slot only two calls later, after a barrier its peers reach only once
their reads of that slot are done (their reads and barriers share one stream). Every side-stream operation
is joined to the caller's stream before `solution` returns.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import symmetric_buffer

CHUNK_BYTES = 8 << 20   # a destination's partial larger than this is pulled in row chunks, overlapped with the GEMM
MAX_CHUNKS = 4
_state = {}


# -- the math (also run on CPU tensors by the tests) ------------------------------------------------------

def destinations(rank, world):
    """The ranks whose rows this rank computes first, in order (step k: rank + k), before its own."""
    return [(rank + step) % world for step in range(1, world)]


def row_chunks(rows, row_bytes):
    """Row ranges [begin, end) of one destination's block, each pulled on its own: up to MAX_CHUNKS."""
    count = max(1, min(MAX_CHUNKS, rows, (rows * row_bytes) // CHUNK_BYTES))
    step = -(-rows // count)
    return [(begin, min(begin + step, rows)) for begin in range(0, rows, step)]


def sum_partials(partials):
    """The element-wise sum of partial products in the dtype: float32 accumulation, one rounding."""
    return partials[0] + partials[1] if len(partials) == 2 else torch.stack(partials).sum(dim=0)


def reduce_own_rows(out, extra, A_own_rows, B):
    """This rank's rows of the sum, in place in `out`, which holds one peer's partial (rounded to the
    dtype, as pulled): the other peers' partials `extra` (summed in float32) added, then this rank's own
    product added in the GEMM's epilogue (beta = 1, float32 accumulation, one rounding)."""
    if extra:
        out.add_(torch.stack(extra).sum(dim=0, dtype=torch.float32))
    return out.addmm_(A_own_rows, B)


def gemm_of_blocks(blocks, rank, world):
    """What `solution` computes, from every rank's (A, B) at hand: every rank's partial for this rank's
    rows (rounded to the dtype), summed (small), or added chunk by chunk to this rank's own product."""
    a, b = blocks[rank]
    rows = a.shape[0] // world
    own = slice(rank * rows, (rank + 1) * rows)
    chunks = row_chunks(rows, b.shape[1] * b.element_size())
    if len(chunks) == 1:
        return sum_partials([blocks[p][0][own] @ blocks[p][1] for p in range(world)])
    sources = [(rank - step) % world for step in range(1, world)]
    partials = [blocks[p][0][own] @ blocks[p][1] for p in sources]
    out = partials[0].clone()
    for begin, end in chunks:
        reduce_own_rows(out[begin:end], [p[begin:end] for p in partials[1:]], a[own][begin:end], b)
    return out


# -- data movement -------------------------------------------------------------------------------------

def _resources(A, B, world):
    """The cached buffer (2 slots of the (M, N) partial), views of the peers' buffers, the staging blocks,
    the side stream and the events, for this shape; made once (the buffer's rendezvous is collective)."""
    key = (tuple(A.shape), tuple(B.shape), A.dtype)
    if key not in _state:
        m, n = A.shape[0], B.shape[1]
        rows = m // world
        buf = symmetric_buffer((2, m, n), A.dtype, tag="expert_gemm_reducescatter")
        chunks = row_chunks(rows, n * A.element_size())
        pipelined = len(chunks) > 1
        _state[key] = {
            "buf": buf,
            "chunks": chunks,
            "theirs": [[buf.peer(p)[s] for p in range(world)] for s in range(2)],
            "stage": torch.empty((max(world - 2, 0), rows, n), dtype=A.dtype, device=A.device),
            "side": torch.cuda.Stream(device=A.device, priority=-1) if pipelined else None,
            "made": [[torch.cuda.Event() for _ in chunks] for _ in range(world - 1)],
            "pulled": [[torch.cuda.Event() for _ in chunks] for _ in range(world - 1)],
            "calls": 0,
        }
    return _state[key]


def solution(A, B):
    world = dist.get_world_size()
    if A.shape[0] % world:
        raise ValueError(f"gemm_reducescatter expert needs M = {A.shape[0]} divisible by the world size {world}")
    if world == 1:
        return A @ B
    res = _resources(A, B, world)
    buf, slot = res["buf"], res["calls"] % 2
    res["calls"] += 1
    rank, rows = buf.rank, A.shape[0] // world
    mine, theirs = buf.local[slot], res["theirs"][slot]
    if res["side"] is None:            # small: partial into the buffer, barrier, one add over NVLink
        torch.mm(A, B, out=mine)
        buf.barrier()                  # every rank's partial is in its slot
        return sum_partials([theirs[p][rank * rows:(rank + 1) * rows] for p in range(world)])

    stage, side, chunks = res["stage"], res["side"], res["chunks"]
    main = torch.cuda.current_stream()
    # the first peer's partial lands in the output itself; the others (world > 2) in the staging blocks
    out = torch.empty((rows, B.shape[1]), dtype=A.dtype, device=A.device)
    landing = [out] + [stage[k] for k in range(world - 2)]
    for k, q in enumerate(destinations(rank, world)):      # step k + 1: rank q's rows, pulled by q
        source = theirs[(rank - k - 1) % world]            # ... while this rank pulls from rank - k - 1
        for c, (begin, end) in enumerate(chunks):
            lo, hi = q * rows + begin, q * rows + end
            torch.mm(A[lo:hi], B, out=mine[lo:hi])
            res["made"][k][c].record(main)
            side.wait_event(res["made"][k][c])
            with torch.cuda.stream(side):
                buf.barrier()                              # every rank has made its chunk c of step k + 1
                landing[k][begin:end].copy_(source[rank * rows + begin:rank * rows + end])   # copy engine
                res["pulled"][k][c].record(side)

    own = A[rank * rows:(rank + 1) * rows]
    for c, (begin, end) in enumerate(chunks):
        for k in range(world - 1):
            main.wait_event(res["pulled"][k][c])
        reduce_own_rows(out[begin:end], [stage[k, begin:end] for k in range(world - 2)], own[begin:end], B)
    return out
