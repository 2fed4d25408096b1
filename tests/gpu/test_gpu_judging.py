"""GPU judging: emulated ranks on one GPU (correctness), the cuda executor (timing), CUDA candidates through
the kernel runtime, and candidates that try to hide work or replay results."""
import gymnasium
import pytest

import pkb_env  # noqa: F401
from pkb_env.task import TaskError, load_task, task_names

ONE_SHOT = r'''
import torch
import torch.distributed as dist
from pkb_env.runtime import compile_cuda, symmetric_buffer, i32, i64

SRC = r"""
#include <cuda_bf16.h>
template <typename T>
__device__ void one_shot(const long long* ptrs, T* out, int ws, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int r = 0; r < ws; ++r) acc += (float)(reinterpret_cast<const T*>(ptrs[r])[i]);
        out[i] = (T)acc;
    }
}
extern "C" __global__ void one_shot_f32(const long long* p, float* o, int ws, long long n) { one_shot<float>(p, o, ws, n); }
extern "C" __global__ void one_shot_bf16(const long long* p, __nv_bfloat16* o, int ws, long long n) { one_shot<__nv_bfloat16>(p, o, ws, n); }
"""
_mod = None


def solution(tensor):
    global _mod
    if _mod is None:
        _mod = compile_cuda(SRC)
    buf = symmetric_buffer(tuple(tensor.shape), tensor.dtype)
    buf.local.copy_(tensor)
    buf.barrier()
    out = torch.empty_like(tensor)
    name = "one_shot_f32" if tensor.dtype == torch.float32 else "one_shot_bf16"
    _mod.function(name)((132,), (512,), buf.ptrs, out, i32(buf.world_size), i64(tensor.numel()))
    buf.barrier()
    return out
'''

SIDE_STREAM = '''
import torch
_side = []
def solution(tensor):
    if not _side:
        _side.append(torch.cuda.Stream())
    out = torch.empty_like(tensor)
    with torch.cuda.stream(_side[0]):          # never joined to the caller's stream
        torch.cuda._sleep(2_000_000)
        out.copy_(tensor)
    return out
'''

REPLAY = '''
import torch
_seen = []
def solution(tensor):
    if len(_seen) >= 3:
        return _seen[0].clone()               # correct on the trials, replayed afterwards
    out = tensor.clone()
    _seen.append(out)
    return out.clone()
'''

ALIAS = '''
def solution(tensor):
    return tensor                              # the input itself, not a result
'''


def make(executor, world_size, task="all_reduce", preset="bench", **kw):
    return gymnasium.make("pkb_env/ParallelKernel-v0", task=task, world_size=world_size, executor=executor,
                          preset=preset, max_turns=1000, **kw)


@pytest.fixture(scope="module", params=[2, 4])
def emulated(request):
    env = make("cuda-emulated", request.param)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.mark.parametrize("task", task_names())
def test_reference_agent_emulated(emulated, task):
    world = emulated.unwrapped.world_size
    spec = load_task(task)   # too large to return, or for the reference on CPU ranks that emulated ranks use
    if spec.output_problem(world, "bench") or spec.cpu_reference_problem(world, "bench"):
        with pytest.raises(TaskError, match="more than"):
            emulated.reset(options={"task": task})
        return
    obs, _ = emulated.reset(options={"task": task})
    _, reward, _, _, info = emulated.step(obs["reference"])
    assert info["correct"], info["feedback"]
    assert info["speedup"] is None and info["reward_terms"]["performance"] == "unavailable"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_one_shot_all_reduce_emulated(dtype):
    env = make("cuda-emulated", 4, dtype=dtype)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(ONE_SHOT)
        assert info["correct"], info["feedback"]
        requests = env.unwrapped.client.run(lambda service: service.compile_requests)
        assert requests >= 4  # every rank asked, the judge compiled once
    finally:
        env.close()


@pytest.fixture(scope="module")
def cuda1():
    env = make("cuda", 1)
    env.reset(seed=0)
    yield env
    env.close()


def test_world_size_one_is_timed_with_the_full_protocol(cuda1):
    obs, _ = cuda1.reset(options={"task": "all_reduce"})
    _, reward, _, _, info = cuda1.step(obs["reference"])
    assert info["correct"], info["feedback"]
    timing = info["record"].timing
    assert timing.calls >= 10 and timing.warmup_calls >= 3 and 0.5 <= info["speedup"] <= 2.0


@pytest.mark.parametrize("code, stage", [(SIDE_STREAM, "verify"), (REPLAY, "time"), (ALIAS, "verify")],
                         ids=["side_stream", "replay_first_output", "alias_input"])
def test_gpu_cheats_are_caught(cuda1, code, stage):
    obs, _ = cuda1.reset(options={"task": "all_reduce"})
    _, reward, _, _, info = cuda1.step(code)
    assert info["verdict"] == "wrong" and info["stage"] == stage, info["feedback"]
    assert info["speedup"] is None
