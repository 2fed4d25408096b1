"""PKB's `utils.triton_utils`: Triton device helpers for symmetric-memory kernels, written for pkb-env.

PKB documents them as: thread and block ids (`get_tid`, `get_ntid`, `get_flat_tid`, `get_flat_bid`), a block-wide
`sync_threads` (bar.sync 0), and signals on a zero-filled uint32 signal pad at system scope: `send_signal` waits
until the slot is 0 and sets it to 1 (so a sender never overwrites a signal its peer has not consumed),
`wait_signal` waits until it is 1 and resets it to 0 (so the pad is zero again after every barrier and a CUDA
graph can replay it); `sem` is "relaxed" or "acq_rel" (release on the send, acquire on the wait).
`blockwise_barrier(signal_pad_ptrs, block_id, rank, world_size, sem)` signals slot
[block_id * world_size + rank] on every rank's pad and waits on its own world_size slots of block_id: blocks
with the same id on every rank meet (a building block, not a memory fence: PKB's docstring lists the three
usual patterns: before reading peers' buffers, relaxed then sync_threads; to publish this block's writes,
sync_threads, acq_rel, sync_threads; before buffers read here may be overwritten, sync_threads then relaxed).
NVLink multicast (multimem) is not among them, as in PKB's. Needs Triton (a GPU executor).
"""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError as exc:   # CPU ranks: no Triton
    raise ImportError(f"utils.triton_utils needs Triton, which is not installed here ({exc}): judge Triton files "
                      f"with a GPU executor (cuda or cuda-emulated)") from None


@triton.jit
def get_tid():
    """(x, y, z) of this thread within its block."""
    return tl.inline_asm_elementwise("mov.u32 $0, %tid.x;\n mov.u32 $1, %tid.y;\n mov.u32 $2, %tid.z;",
                                     "=r,=r,=r", [], dtype=(tl.uint32, tl.uint32, tl.uint32), is_pure=True, pack=1)


@triton.jit
def get_ntid():
    """(x, y, z) sizes of the block."""
    return tl.inline_asm_elementwise("mov.u32 $0, %ntid.x;\n mov.u32 $1, %ntid.y;\n mov.u32 $2, %ntid.z;",
                                     "=r,=r,=r", [], dtype=(tl.uint32, tl.uint32, tl.uint32), is_pure=True, pack=1)


@triton.jit
def get_flat_tid():
    """This thread's index within its block, x fastest."""
    x, y, z = get_tid()
    nx, ny, _ = get_ntid()
    return (z * ny + y) * nx + x


@triton.jit
def get_flat_bid():
    """This program's index within the grid, axis 0 fastest."""
    return (tl.program_id(2) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(0) + tl.program_id(0)


@triton.jit
def sync_threads():
    """Every thread of the block reaches this point before any goes on (bar.sync 0)."""
    tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def send_signal(addrs, sem: tl.constexpr):
    """Spin until the slot at `addrs` is 0, then set it to 1 (system scope)."""
    if sem == "relaxed":
        tl.inline_asm_elementwise(
            "{ .reg .u32 %old; .reg .pred %done;\n"
            "SEND_RELAXED: atom.global.relaxed.sys.cas.b32 %old, [$1], 0, 1;\n"
            " setp.eq.u32 %done, %old, 0;\n @!%done bra SEND_RELAXED; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    elif sem == "acq_rel":
        tl.inline_asm_elementwise(
            "{ .reg .u32 %old; .reg .pred %done;\n"
            "SEND_RELEASE: atom.global.release.sys.cas.b32 %old, [$1], 0, 1;\n"
            " setp.eq.u32 %done, %old, 0;\n @!%done bra SEND_RELEASE; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.static_assert(False, "sem must be 'relaxed' or 'acq_rel'")


@triton.jit
def wait_signal(addrs, sem: tl.constexpr):
    """Spin until the slot at `addrs` is 1, then reset it to 0 (system scope)."""
    if sem == "relaxed":
        tl.inline_asm_elementwise(
            "{ .reg .u32 %old; .reg .pred %done;\n"
            "WAIT_RELAXED: atom.global.relaxed.sys.cas.b32 %old, [$1], 1, 0;\n"
            " setp.eq.u32 %done, %old, 1;\n @!%done bra WAIT_RELAXED; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    elif sem == "acq_rel":
        tl.inline_asm_elementwise(
            "{ .reg .u32 %old; .reg .pred %done;\n"
            "WAIT_ACQUIRE: atom.global.acquire.sys.cas.b32 %old, [$1], 1, 0;\n"
            " setp.eq.u32 %done, %old, 1;\n @!%done bra WAIT_ACQUIRE; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.static_assert(False, "sem must be 'relaxed' or 'acq_rel'")


@triton.jit
def blockwise_barrier(signal_pad_ptrs, block_id, rank: tl.constexpr, world_size: tl.constexpr, sem: tl.constexpr):
    """Blocks with id `block_id` (None: this program's flat id) meet across the ranks (the module docstring).
    `signal_pad_ptrs` is the device array of every rank's signal pad address (a symmetric buffer's)."""
    if block_id is None:
        block_id = get_flat_bid()
    peers = tl.arange(0, world_size)
    pads = tl.load(signal_pad_ptrs.to(tl.pointer_type(tl.uint64)) + peers).to(tl.pointer_type(tl.uint32))
    mine = tl.load(signal_pad_ptrs.to(tl.pointer_type(tl.uint64)) + rank).to(tl.pointer_type(tl.uint32))
    if get_flat_tid() < world_size:
        send_signal(pads + block_id * world_size + rank, sem)
        wait_signal(mine + block_id * world_size + peers, sem)
