"""One ZeRO-2 step: the backward writes straight into symmetric memory, then ONE kernel does the
gradient reduce-scatter, Adam on this rank's shard and the parameter all-gather.

The reference runs autograd (a forward, a loss and ~15 backward kernels), a `torch.cat` of the gradients,
an NCCL reduce-scatter, a division, a `torch.cat` of the parameters, ~8 element-wise Adam kernels, an NCCL
all-gather and four copies into the parameters. Here:
  forward and backward by hand, fp32 (cuBLAS, as the reference): Z = X W1^T + b1, h = silu(Z),
           out = h W2^T + b2, d = out - y; every gradient GEMM and bias sum writes with `out=` into this
           rank's symmetric buffer, in flat order (W1, b1, W2, b2): the flat gradient is never copied or
           concatenated. The loss's 2 / (N O) (the mean over this rank's rows times the average over the
           ranks: 2 / (n O) / W) is not applied to d; the kernel applies it once to the sum.
  the kernel, grid-stride over i in [0, S), S = P / W, k = r S + i (r this rank):
    barrier  `pkb_block_barrier`: block b of every rank has started, so every rank's backward (earlier
             on its stream) is done: its gradients are published (no `buf.barrier()` launch);
    phase 1  g = (sum over ranks q, in rank order, of grad_q[k]) in fp32, times 2 / (N O) rounded once
             (double product): this rank's shard of the averaged gradient, written to the output; Adam in
             float64 from the fp32 state (m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, w -= lr (m / bc1)
             / (sqrt(v / bc2) + eps), bc = 1 - beta^step from the host in float64, as the reference
             computes them), every state rounded once to fp32 (the golden's float64 step rounded once: the
             error is the gradient's alone); m and v written in place, the new w into this rank's W1, b1,
             W2 or b2 and into its buffer's parameter region;
    barrier  `pkb_block_barrier`: block b's share of every shard is updated on every rank;
    phase 2  all-gather: for every peer p, w[p S + i] = its buffer's parameter region [i] (L2-only loads:
             written during this kernel), straight into this rank's W1, b1, W2, b2. Every rank holds the
             owner's bits: the parameters are identical on every rank.
Element i is handled by the same block in both phases and on every rank (same grid: S, the SM count and W
agree), so per-block barriers suffice; the grid is at most one 512-thread block per SM (and 2304 // W
blocks, the pad's capacity) so that every block is resident. Nothing crosses NVLink but the reduce-scatter's
(W-1)/W P fp32 gradient values and the all-gather's (W-1)/W P parameters, as in the reference; the Adam
state is read and written once, the gradients never leave the buffer they are made in.

One buffer slot suffices (no trailing barrier, no second slot): a rank's next backward overwrites its
gradient region only after its kernel has finished, i.e. after every peer's block passed the second
barrier, i.e. after every peer's phase 1 read it; its next kernel overwrites its parameter region only after
the first barrier of that kernel, which every peer reaches only once its previous kernel, whose phase 2
read that region, has finished.

Single elements, no 16-byte packs: a shard is ~one element per thread at PKB's size (S = 65728 at W = 4,
132 x 512 threads), so the kernel is latency-bound, and shards and parameter boundaries need not be
pack-aligned (S = 35 at `tiny`, W = 8). Where the time goes: the ~10 small launches of the forward and
backward (cuBLAS), then one launch with two cross-rank barriers.
"""
import math

import torch

from pkb_env.runtime import SIGNAL_PAD_CUDA, compile_cuda, f64, i32, i64, symmetric_buffer

_KERNELS = r"""
// The flat parameter k: W1 [0, o1), b1 [o1, o2), W2 [o2, o3), b2 [o3, P).
struct Params {
    float* w1; float* b1; float* w2; float* b2;
    long long o1, o2, o3;
    __device__ __forceinline__ float* at(long long k) const {
        return k < o1 ? w1 + k : (k < o2 ? b1 + (k - o1) : (k < o3 ? w2 + (k - o2) : b2 + (k - o3)));
    }
};

// bufs: every rank's buffer of floats: the flat gradient [0, P), the new parameter shard [poff, poff + S).
template <int W>
__device__ __forceinline__ void zero2_step(const long long* bufs, const unsigned long long* pads, int rank, int ws,
                                           long long S, long long poff, Params prm,
                                           float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                           float* __restrict__ grad_out, double grad_scale, double lr,
                                           double beta1, double beta2, double eps, double bc1, double bc2) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    const float* src[W > 0 ? W : 1];   // every rank's gradients, read once
#pragma unroll
    for (int q = 0; q < (W > 0 ? W : 1); ++q) src[q] = reinterpret_cast<const float*>(bufs[q]);
    float* shard = reinterpret_cast<float*>(bufs[rank]) + poff;

    pkb_block_barrier(pads, rank, ws);  // block b of every rank started: every rank's backward is done

    // phase 1: reduce-scatter of shard `rank` and Adam on it
    const long long base = (long long)rank * S;
    for (long long i = tid; i < S; i += nthreads) {
        const long long k = base + i;
        float acc;
        if constexpr (W > 0) {
            float part[W];
#pragma unroll
            for (int q = 0; q < W; ++q) part[q] = __ldcg(src[q] + k);
            acc = part[0];
#pragma unroll
            for (int q = 1; q < W; ++q) acc += part[q];
        } else {
            acc = __ldcg(reinterpret_cast<const float*>(bufs[0]) + k);
            for (int q = 1; q < ws; ++q) acc += __ldcg(reinterpret_cast<const float*>(bufs[q]) + k);
        }
        const float g = __double2float_rn((double)acc * grad_scale);
        const double gd = (double)g;
        const double m = beta1 * (double)exp_avg[i] + (1.0 - beta1) * gd;
        const double v = beta2 * (double)exp_avg_sq[i] + (1.0 - beta2) * gd * gd;
        float* w = prm.at(k);
        const float updated = __double2float_rn((double)*w - lr * (m / bc1) / (sqrt(v / bc2) + eps));
        grad_out[i] = g;
        exp_avg[i] = __double2float_rn(m);
        exp_avg_sq[i] = __double2float_rn(v);
        *w = updated;
        shard[i] = updated;
    }

    pkb_block_barrier(pads, rank, ws);  // block b's share of every shard is updated on every rank

    // phase 2: all-gather of the other ranks' new shards into the parameters (all peers' loads issued
    // before the stores when W is known at compile time)
    if constexpr (W > 1) {
        const float* theirs[W - 1];
#pragma unroll
        for (int j = 1; j < W; ++j) theirs[j - 1] = reinterpret_cast<const float*>(bufs[(rank + j) % W]) + poff;
        for (long long i = tid; i < S; i += nthreads) {
            float w[W - 1];
#pragma unroll
            for (int j = 1; j < W; ++j) w[j - 1] = __ldcg(theirs[j - 1] + i);
#pragma unroll
            for (int j = 1; j < W; ++j) *prm.at((long long)((rank + j) % W) * S + i) = w[j - 1];
        }
    } else if constexpr (W == 0) {
        for (int j = 1; j < ws; ++j) {
            const int p = (rank + j) % ws;
            const float* theirs = reinterpret_cast<const float*>(bufs[p]) + poff;
            for (long long i = tid; i < S; i += nthreads) *prm.at((long long)p * S + i) = __ldcg(theirs + i);
        }
    }
}

extern "C" __global__ void __launch_bounds__(512, 1) zero2_adam_step(
        const long long* bufs, const unsigned long long* pads, int rank, int ws, long long S, long long poff,
        float* w1, float* b1, float* w2, float* b2, long long o1, long long o2, long long o3,
        float* exp_avg, float* exp_avg_sq, float* grad_out, double grad_scale, double lr, double beta1,
        double beta2, double eps, double bc1, double bc2) {
    Params prm{w1, b1, w2, b2, o1, o2, o3};
    switch (ws) {   // world sizes 1, 2, 4, 8 unrolled; any other at run time
#define PKB_ZERO2_CALL(WS) zero2_step<WS>(bufs, pads, rank, ws, S, poff, prm, exp_avg, exp_avg_sq, grad_out, \
                                          grad_scale, lr, beta1, beta2, eps, bc1, bc2)
        case 1: PKB_ZERO2_CALL(1); break;
        case 2: PKB_ZERO2_CALL(2); break;
        case 4: PKB_ZERO2_CALL(4); break;
        case 8: PKB_ZERO2_CALL(8); break;
        default: PKB_ZERO2_CALL(0); break;
#undef PKB_ZERO2_CALL
    }
}
"""

SRC = SIGNAL_PAD_CUDA + _KERNELS   # fp32 only: no 16-bit headers

THREADS = 512
MAX_PAD_FLAGS = 2304  # the default signal pad: at most 2304 // world_size blocks may use it
_state = {}


def param_offset(p):
    """Where the parameter shard starts in a rank's buffer (in floats): after the P gradients, 16-byte aligned."""
    return -(-p // 4) * 4


def grid_blocks(shard, sms, world):
    """Blocks of THREADS threads: enough for one element a thread, at most one per SM (all resident at once,
    as the in-kernel barriers need) and within the signal pad."""
    return max(1, min(-(-shard // THREADS), sms, MAX_PAD_FLAGS // world))


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def backward_into(flat, X, y, W1, b1, W2, b2):
    """The forward and backward in fp32, each gradient written into its place in `flat` (P floats: W1, b1,
    W2, b2 flattened in that order), unscaled: the gradient of sum((out - y)^2) / 2."""
    H, D = W1.shape
    O = W2.shape[0]
    o1, o2, o3 = H * D, H * D + H, H * D + H + O * H
    x = X.float()
    z = torch.addmm(b1, x, W1.t())
    h = torch.nn.functional.silu(z)
    d = torch.addmm(b2, h, W2.t()).sub_(y)                        # (n, O): out - y
    torch.mm(d.t(), h, out=flat[o2:o3].view(O, H))                 # W2
    torch.sum(d, 0, out=flat[o3:o3 + O])                           # b2
    dz = torch.ops.aten.silu_backward(torch.mm(d, W2), z)          # (n, H)
    torch.mm(dz.t(), x, out=flat[0:o1].view(H, D))                 # W1
    torch.sum(dz, 0, out=flat[o1:o2])                              # b1


def solution(X, y, W1, b1, W2, b2, exp_avg_part, exp_avg_sq_part, lr, beta1, beta2, eps, step):
    params = (W1, b1, W2, b2)
    if any(p.dtype != torch.float32 for p in params + (exp_avg_part, exp_avg_sq_part)):
        raise TypeError("zero2_optimizer_shard_grad expert: fp32 parameters and moments only")
    live = [p if p.is_contiguous() else p.contiguous() for p in params]
    m, v = exp_avg_part.contiguous(), exp_avg_sq_part.contiguous()
    S = m.numel()
    P = sum(p.numel() for p in live)
    buf = symmetric_buffer((param_offset(P) + S,), torch.float32, tag="expert_zero2_optimizer_shard_grad")
    world, rank = buf.world_size, buf.rank
    if S * world != P:
        raise ValueError(f"zero2_optimizer_shard_grad expert: {P} parameters do not split into {world} shards of {S}")
    grad = torch.empty(S, dtype=torch.float32, device=X.device)
    if S == 0:
        return grad
    backward_into(buf.local, X, y, *live)
    H, D = live[0].shape
    O = live[2].shape[0]
    rows = X.shape[0] * world                                      # the global batch
    _module().function("zero2_adam_step")(
        (grid_blocks(S, _sm_count(X.device), world),), (THREADS,), buf.ptrs, buf.signal_pad_ptrs, i32(rank),
        i32(world), i64(S), i64(param_offset(P)), *live, i64(H * D), i64(H * D + H), i64(H * D + H + O * H),
        m, v, grad, f64(2.0 / (rows * O)), f64(lr), f64(beta1), f64(beta2), f64(eps),
        f64(1.0 - math.pow(beta1, step)), f64(1.0 - math.pow(beta2, step)))
    for target, value in zip(params + (exp_avg_part, exp_avg_sq_part), live + [m, v]):
        if target is not value:
            target.copy_(value)
    return grad
