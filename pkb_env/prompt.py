"""The prompt: everything a model needs for one task, as one text ready for a chat template."""
from __future__ import annotations

from pkb_env.judge.screen import reference_parameters
from pkb_env.task import TaskSpec

RULES = """Rules
- Reply with ONE Python module in a ```python fenced block. It must define `solution` with the same
  positional parameters as the reference; it is called on every rank with that rank's inputs, after
  torch.distributed is initialised (default process group, one process per rank).
- Return new tensors with the reference's shapes and dtypes on every rank (None where the reference
  returns None). Do not modify the inputs. Do not return views of the inputs.
- Inputs are random and different on every call; outputs of timed calls are checked too, so caching,
  replaying or deferring work across calls fails.
- Not allowed: patching torch, time or the judge; reading the judge's files or environment; signalling
  other processes. Such code is rejected with the lowest reward.
- Speed: many barrier-aligned calls, each timed on its slowest rank (the median over calls on GPUs, the
  minimum on CPU ranks), against the reference's time measured the same way; the interconnect roofline
  fraction is reported too."""


RUNTIME_GUIDE = '''## Kernel runtime (GPU executors)
`pkb_env.runtime` compiles CUDA fast (NVRTC; once per step for all ranks, cached across steps) and gives
symmetric memory: a buffer on every rank, mapped into every rank, so kernels read and write peers directly
over NVLink. Worked example, a one-shot all-reduce of float32:
```python
import torch
from pkb_env.runtime import compile_cuda, symmetric_buffer, i32, i64

SRC = """
extern "C" __global__ void sum_peers(const long long* ptrs, float* out, int ws, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int r = 0; r < ws; ++r) acc += reinterpret_cast<const float*>(ptrs[r])[i];
        out[i] = acc;
    }
}"""
_kernel = []

def solution(tensor):
    if not _kernel:
        _kernel.append(compile_cuda(SRC).function("sum_peers"))
    buf = symmetric_buffer(tuple(tensor.shape), tensor.dtype)  # made once, reused by later calls
    buf.local.copy_(tensor)
    buf.barrier()                     # every rank has published its input
    out = torch.empty_like(tensor)
    _kernel[0]((132,), (512,), buf.ptrs, out, i32(buf.world_size), i64(tensor.numel()))
    buf.barrier()                     # no rank overwrites its buffer while a peer still reads it
    return out
```
Also available: `buf.peer(r)` (rank r's buffer as a tensor; `copy_` to or from it uses the copy engine),
`buf.signal_pad_ptrs` with `pkb_env.runtime.SIGNAL_PAD_CUDA` (barriers inside kernels),
`compile_cuda(src, backend="nvcc")`, `pkb_env.runtime.load_inline(...)` (torch extensions, built once),
and Triton kernels.'''


def build_prompt(task: TaskSpec, preset: str, dtype: str, world_size: int, topology_text: str,
                 feedback: str = "", turn: int = 0, gpu: bool = False) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in task.preset(preset).dims.items())
    params = ", ".join(reference_parameters(task.reference_source))
    allowed = ("Calling torch.distributed collectives is allowed (a solution that only calls them scores "
               "about 1x); faster solutions move data more cleverly." if task.collectives_allowed
               else "torch.distributed collectives are NOT allowed for this task.")
    parts = [
        f"# Task: {task.title} ({task.name})",
        f"Write a faster multi-rank implementation of `solution({params})`.",
        task.description,
        f"Problem size: {dims}; dtype {dtype}; world size {world_size}.",
        f"Inputs (per rank): {task.inputs_doc}",
        f"Outputs (per rank): {task.outputs_doc}",
        f"Tolerance: {_tolerance(task, dtype)}",
        "## Reference implementation\n```python\n" + task.reference_source.rstrip() + "\n```",
        "## Hardware\n" + topology_text,
        "## " + RULES,
        allowed,
    ]
    if gpu:
        parts.append(RUNTIME_GUIDE)
    if feedback:
        parts.append(f"## Result of your previous attempt (turn {turn})\n{feedback}\n\n"
                     "Fix the problems above or make the solution faster, and reply with the whole module again.")
    return "\n\n".join(parts) + "\n"


def _tolerance(task: TaskSpec, dtype: str) -> str:
    tol = task.tolerance(dtype)
    if tol.exact:
        return f"exact ({tol.reason})."
    return f"|got - expected| <= {tol.atol:g} + {tol.rtol:g} * |expected| ({tol.reason})."
