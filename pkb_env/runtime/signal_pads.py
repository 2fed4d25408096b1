"""CUDA source for barriers inside kernels, on symmetric-memory signal pads.

Each rank's signal pad is an array of uint32 flags mapped into every rank. For block b, the flag at
[b * world_size + r] on rank p means "rank r reached barrier in block b". A rank signals a peer with a
compare-and-swap 0 -> 1 (it waits if the peer has not yet consumed the previous signal, which makes
back-to-back barriers safe) and consumes its own flags with 1 -> 0, so pads return to zero after every
barrier. System-scope fences order the data writes before the signal and the reads after it.

Include it in a kernel's source: `compile_cuda(SIGNAL_PAD_CUDA + MY_SOURCE)`, pass `buf.signal_pad_ptrs`
and call `pkb_block_barrier(pads, rank, world_size)` from every thread of every participating block.
The default pad (9216 bytes) holds 2304 flags, so at most 2304 // world_size blocks may use it.
Every block of the grid must be resident at once (no more blocks than the GPU runs concurrently, e.g.
one per SM), or blocks spinning in the barrier starve those not yet scheduled and the kernel deadlocks.
Block 0 uses the same flags as channel 0 of `SymmetricBuffer.barrier()`; both follow this protocol, so
mixing them on one stream is safe, but not concurrently from two streams.
"""

SIGNAL_PAD_CUDA = r"""
__device__ __forceinline__ void pkb_block_barrier(const unsigned long long* pads, int rank, int world_size) {
    __syncthreads();
    if (threadIdx.x < world_size) {
        const int peer = threadIdx.x;
        unsigned int* peer_pad = reinterpret_cast<unsigned int*>(pads[peer]);
        unsigned int* own_pad = reinterpret_cast<unsigned int*>(pads[rank]);
        const size_t base = (size_t)blockIdx.x * world_size;
        __threadfence_system();
        while (atomicCAS_system(peer_pad + base + rank, 0u, 1u) != 0u) { }
        while (atomicCAS_system(own_pad + base + peer, 1u, 0u) != 1u) { }
        __threadfence_system();
    }
    __syncthreads();
}
"""
