"""The prompt: everything a model needs for one task, as one text ready for a chat template.

The problem, input, output, tolerance and cost sections are generated from the task's declarations
(pkb_env/contract/describe.py); the rules are the suite's, plus those of the task's family.
"""
from __future__ import annotations

from dataclasses import dataclass

from pkb_env.config import STATISTIC_WORDS
from pkb_env.contract import FAMILIES, Peaks
from pkb_env.contract.describe import cost_lines, input_lines, output_lines, problem_lines, tolerance_lines
from pkb_env.sandbox.limits import RANK_FILE_BYTES
from pkb_env.task import TaskSpec
from pkb_env.topology import Calibration, Topology

def rules(statistic: str) -> str:
    """The suite's rules; `statistic` (TimingProtocol.statistic of the ranks' clock) says what "time per call" is
    there, in the same words the feedback uses (config.STATISTIC_WORDS)."""
    return f"""Rules
- Reply with ONE Python module in a ```python fenced block. It must define `solution` with the same
  positional parameters as the reference; it is called on every rank with that rank's inputs, after
  torch.distributed is initialised (default process group, one process per rank). Process groups the
  task needs are built by the judge before the first call and passed in; you may build your own.
- Return new tensors with the reference's shapes and dtypes on every rank (None where the reference
  returns None). Do not modify the inputs. Do not return views of the inputs.
- Inputs are random and different on every call; outputs of timed calls are checked too, so caching,
  replaying or deferring work across calls fails.
- Rejected with the lowest reward, whatever the outputs: patching torch, time or the judge; signalling
  other processes; reading /proc or raw memory; inspecting the caller's frames, the heap or other
  modules' internals; loading code from files (importlib's file loaders, runpy, sys.path changes); NVLink
  multicast, which is off here (multimem PTX, cuMulticast*, a symmetric buffer's multicast pointer, NVLS
  switches, the CUDA driver through ctypes): use peer loads/stores or the copy engine.
- Allowed, and noted in the feedback: opening files and reading the environment (a rank's environment
  holds none of the judge's secrets, and where the host allows it a rank sees only its own directory and
  the toolchain), threads, extra processes, calling torch.distributed (where the task allows it).
- Limits per rank: at most {RANK_FILE_BYTES >> 20} MiB written to any one file, printed output (stdout and stderr)
  included: a write past it fails (OSError: File too large).
- Speed: your time per call is {STATISTIC_WORDS[statistic]},
  over many calls back to back, each on fresh inputs; the reference's is measured the same way in the
  same step, and your speedup is the reference's time per call over yours. The roofline fraction (the
  cost model's bound, above, over your time per call) is reported too."""


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
Scalars go through `i32`, `i64`, `u64`, `f32`, `f64` (the C type the kernel declares). Also available:
`buf.peer(r)` (rank r's buffer as a tensor; `copy_` to or from it uses the copy engine),
`buf.signal_pad_ptrs` with `pkb_env.runtime.SIGNAL_PAD_CUDA` (barriers inside kernels), CUDA helpers to
prepend to your source: `COPY_CUDA` (`copy_span`: 16-byte-pack copies) and `REDUCE_CUDA` (`reduce_span`:
float32 sums of the ranks' buffers),
`compile_cuda(src, backend="nvcc")`, `pkb_env.runtime.load_inline(...)` (torch extensions, built once),
and Triton kernels.'''


def build_prompt(task: TaskSpec, preset: str, dtype: str, world_size: int, topology_text: str,
                 feedback: str = "", turn: int = 0, gpu: bool = False, peaks: Peaks | None = None,
                 statistic: str = "burst-median") -> str:
    """The whole prompt. `peaks` (Judge.peaks()) turns the cost model's terms into times; `statistic` is the
    timing figure of the ranks' clock (the rules say what it is)."""
    family = FAMILIES[task.family]
    allowed = ("Calling torch.distributed collectives is allowed (a solution that only calls them scores "
               "about 1x); faster solutions move data more cleverly." if task.collectives_allowed
               else "torch.distributed collectives are NOT allowed for this task.")
    parts = [
        f"# Task: {task.title} ({task.name})",
        f"Write a faster multi-rank implementation of `solution({', '.join(task.parameters)})`.",
        task.description,
        "## Problem\n" + "\n".join(problem_lines(task, preset, dtype, world_size)),
        "## Inputs (positional, per rank; fresh random values on every call)\n"
        + "\n".join(input_lines(task, preset, dtype, world_size)),
        "## Outputs (per rank)\n" + "\n".join(output_lines(task, preset, dtype, world_size)
                                               + tolerance_lines(task, preset, dtype, world_size)),
        "## Cost model (per rank, at this size)\n" + "\n".join(cost_lines(task, preset, dtype, world_size, peaks)),
        "## Reference implementation\n```python\n" + task.reference_source.rstrip() + "\n```",
        "## Hardware\n" + topology_text,
        "## " + rules(statistic),
        f"Family, {family.title.lower()}: {family.rules}",
        allowed,
    ]
    if gpu:
        parts.append(RUNTIME_GUIDE)
    if feedback:
        parts.append(f"## Result of your previous attempt (turn {turn})\n{feedback}\n\n"
                     "Fix the problems above or make the solution faster, and reply with the whole module again.")
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class Hardware:
    """What a prompt says of where the code runs: the executor (resolved), the world size, the board's topology
    config, whether the ranks are GPUs (which adds the kernel runtime's guide), and the timing figure. A
    JudgeService's comes from its executor; `pkb-env show --topology NAME` makes one for a machine that is not
    here, as make_executor would make it there (pkb_env/executors/__init__.py, `imagined_executor`), so the
    prompt a GPU machine would get can be read on any machine."""

    executor: str
    world_size: int
    topology: Topology
    gpu: bool
    statistic: str   # the timing figure of the ranks' clock (TimingProtocol.statistic), which the rules define

    def describe(self, calibration: Calibration | None) -> str:
        """The hardware paragraph of the prompt, with the measured figures of `calibration` where there is one."""
        return self.topology.describe(self.world_size, self.executor, calibration)

    def prompt(self, task: TaskSpec, preset: str, dtype: str, calibration: Calibration | None, feedback: str = "",
               turn: int = 0) -> str:
        """The whole prompt of `task` on this hardware (build_prompt), its cost model timed at the peaks in force."""
        return build_prompt(task, preset, dtype, self.world_size, self.describe(calibration), feedback, turn,
                            gpu=self.gpu, peaks=self.topology.peaks(calibration), statistic=self.statistic)
