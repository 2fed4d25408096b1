"""CUDA source for element-wise copies with 16-byte packs: `vector_head` and `copy_span`.

Defines, for any element type T (float, __nv_bfloat16, __half, ...):
  vector_head<T>(a, b, n)   elements before the first 16-byte boundary when `a` and `b` share their
                            alignment, else n (no 16-byte packs are possible: the whole span is scalar);
  copy_span<T>(dst, src, n, tid, nthreads)
                            dst[i] = src[i] for i in [0, n): 16-byte packs (uint4) in the aligned middle,
                            single elements for the unaligned head and the short tail; this thread is worker
                            `tid` of `nthreads` (a grid-stride loop);
  copy_span<T, true>(...)   the same with L2-only loads (`__ldcg`), for data another block or rank wrote
                            during this kernel (after an in-kernel barrier such as `pkb_block_barrier`).

Include it in a kernel's source, after the headers of the types the kernels instantiate it with:
`compile_cuda(MY_HEADERS + COPY_CUDA + MY_KERNELS)`, MY_HEADERS e.g. `#include <cuda_bf16.h>`; it needs no
header itself. It is wrapped in an include guard (PKB_COPY_CUDA), so concatenating it twice, or with
REDUCE_CUDA (which contains it), defines everything once.
"""

COPY_CUDA = r"""
#ifndef PKB_COPY_CUDA
#define PKB_COPY_CUDA
// Elements before the first 16-byte boundary when `a` and `b` share their alignment, else all n (scalar).
template <typename T>
__device__ __forceinline__ long long vector_head(const void* a, const void* b, long long n) {
    const unsigned long long x = reinterpret_cast<unsigned long long>(a);
    const unsigned long long y = reinterpret_cast<unsigned long long>(b);
    if (((x ^ y) & 15ull) != 0ull) return n;
    const long long head = (long long)(((16ull - (x & 15ull)) & 15ull) / sizeof(T));
    return head < n ? head : n;
}

// dst[i] = src[i] for i in [0, n): 16-byte packs in the aligned middle, single elements at the ends.
// This thread is worker `tid` of `nthreads`. L2_ONLY: L2-only loads (.cg), for a source written during
// this kernel (by another block or rank, ordered by an in-kernel barrier).
template <typename T, bool L2_ONLY = false>
__device__ __forceinline__ void copy_span(T* dst, const T* src, long long n, long long tid, long long nthreads) {
    constexpr int V = 16 / sizeof(T);
    const long long head = vector_head<T>(src, dst, n);
    const long long nvec = (n - head) / V;
    const long long tail = head + nvec * V;
    const uint4* vs = reinterpret_cast<const uint4*>(src + head);
    uint4* vd = reinterpret_cast<uint4*>(dst + head);
    for (long long i = tid; i < nvec; i += nthreads) {
        if constexpr (L2_ONLY) vd[i] = __ldcg(vs + i); else vd[i] = vs[i];
    }
    const long long scalars = head + (n - tail);
    for (long long k = tid; k < scalars; k += nthreads) {
        const long long i = k < head ? k : tail + (k - head);
        if constexpr (L2_ONLY) dst[i] = __ldcg(src + i); else dst[i] = src[i];
    }
}
#endif  // PKB_COPY_CUDA
"""
