"""GEMM + reduce-scatter with the reduction hidden behind the GEMM: partials by destination, pulled as made.

Rank r's output is row block r of sum over ranks p of A_p @ B_p. The main stream computes the partial
products the PEERS need first, destination by destination (rank r+1's rows, then r+2's, ...), each in row
chunks, into this rank's symmetric buffer; after each chunk an event lets a high-priority side stream pass
a stream-ordered barrier (every rank has made the chunk of that step) and pull, by copy engine, the chunk
its own rows got from the matching peer, straight into the output. Last, the main stream computes its own
rows chunk by chunk, adding them to the pulled partials in the GEMM's epilogue: `out.addmm_(A_own_rows, B)`
(beta = 1, float32 accumulation, one rounding per term, as the task's split-K tolerance allows).

Why it beats the reference: the reference finishes the whole (M, N) GEMM before an NCCL reduce-scatter
starts; here the transfers overlap the GEMM of the next destination's rows and the own rows, and the
reduction costs no pass of its own (it is the epilogue's beta = 1).

Buffers are reused across calls without a trailing barrier: the buffer has two slots and call i writes
slot i % 2, so a rank overwrites a slot only two calls later, after a barrier its peers reach only once
their pulls of that slot are done (their pulls and barriers share one stream). Every side-stream operation
is joined to the caller's stream before `solution` returns.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import symmetric_buffer

CHUNK_BYTES = 8 << 20   # a destination's partial larger than this goes in row chunks, so its pull starts sooner
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


def reduce_own_rows(out, extra, A_own_rows, B):
    """This rank's rows of the sum, in place in `out`, which holds one peer's partial (rounded to the
    dtype, as pulled): the other peers' partials `extra` (summed in float32) added, then this rank's own
    product added in the GEMM's epilogue (beta = 1, float32 accumulation, one rounding)."""
    if extra:
        out.add_(torch.stack(extra).sum(dim=0, dtype=torch.float32))
    return out.addmm_(A_own_rows, B)


def gemm_of_blocks(blocks, rank, world):
    """What `solution` computes, from every rank's (A, B) at hand: each peer's partial for this rank's rows
    (made by that peer, rounded to the dtype), added chunk by chunk to this rank's own product."""
    a, b = blocks[rank]
    rows = a.shape[0] // world
    own = slice(rank * rows, (rank + 1) * rows)
    sources = [(rank - step) % world for step in range(1, world)]
    partials = [blocks[p][0][own] @ blocks[p][1] for p in sources]
    out = partials[0].clone()
    for begin, end in row_chunks(rows, b.shape[1] * b.element_size()):
        reduce_own_rows(out[begin:end], [p[begin:end] for p in partials[1:]], a[own][begin:end], b)
    return out


# -- data movement -------------------------------------------------------------------------------------

def _resources(A, B, world):
    key = (tuple(A.shape), tuple(B.shape), A.dtype)
    if key not in _state:
        rows, n = A.shape[0] // world, B.shape[1]
        buf = symmetric_buffer((2, A.shape[0], n), A.dtype, tag="expert_gemm_reducescatter")
        chunks = row_chunks(rows, n * A.element_size())
        _state[key] = {
            "buf": buf,
            "peers": [buf.peer(p) for p in range(world)],
            "stage": torch.empty((max(world - 2, 0), rows, n), dtype=A.dtype, device=A.device),
            "chunks": chunks,
            "side": torch.cuda.Stream(device=A.device, priority=-1),  # barriers and copies ahead of the GEMM
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
    buf, stage, side, chunks = res["buf"], res["stage"], res["side"], res["chunks"]
    rank, slot = buf.rank, res["calls"] % 2
    res["calls"] += 1
    rows = A.shape[0] // world
    mine = buf.local[slot]
    main = torch.cuda.current_stream()

    # the first peer's partial lands in the output itself; the others (world > 2) in the staging blocks
    out = torch.empty((rows, B.shape[1]), dtype=A.dtype, device=A.device)
    landing = [out] + [stage[k] for k in range(world - 2)]
    for k, q in enumerate(destinations(rank, world)):      # step k + 1: rank q's rows, pulled by q
        source = (rank - k - 1) % world                    # ... while this rank pulls from rank - k - 1
        theirs = res["peers"][source][slot]
        for c, (begin, end) in enumerate(chunks):
            lo, hi = q * rows + begin, q * rows + end
            torch.mm(A[lo:hi], B, out=mine[lo:hi])
            res["made"][k][c].record(main)
            side.wait_event(res["made"][k][c])
            with torch.cuda.stream(side):
                buf.barrier()                              # every rank has made its chunk c of step k + 1
                landing[k][begin:end].copy_(theirs[rank * rows + begin:rank * rows + end])   # copy engine
                res["pulled"][k][c].record(side)

    own = A[rank * rows:(rank + 1) * rows]
    for c, (begin, end) in enumerate(chunks):
        for k in range(world - 1):
            main.wait_event(res["pulled"][k][c])
        reduce_own_rows(out[begin:end], [stage[k, begin:end] for k in range(world - 2)], own[begin:end], B)
    return out
