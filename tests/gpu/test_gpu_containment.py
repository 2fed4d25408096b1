"""Containment on a GPU host: ranks in the allowlisted root still find the driver, the NVIDIA nodes, NVRTC and
the CUDA libraries; a CUDA extension is built in a build cell and runs on GPU ranks; nothing of the judge's
home is visible to a GPU rank either. (The CPU-rank tests of tests/sandbox/test_compile_containment.py and
tests/sandbox/test_file_access.py run here too.)"""
import os
import secrets
import shutil

import gymnasium
import pytest

import pkb_env  # noqa: F401

COPY_EXTENSION = r'''
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor copy(torch::Tensor x) {
    auto y = torch::empty_like(x);
    copy_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
'''


@pytest.fixture(scope="module")
def cuda1():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=1, executor="cuda",
                         dtype="float32", max_turns=100)
    env.reset(seed=0)
    yield env
    env.close()


def test_gpu_ranks_see_the_driver_and_nothing_of_the_home(cuda1):
    isolation = cuda1.unwrapped.client.run(lambda service: service.isolation())
    assert isolation["filesystem"].startswith("allowlisted root") and "nvidia" in isolation["filesystem"], isolation
    home = os.path.join(os.path.expanduser("~"), f".pkb-env-gpu-test-{secrets.token_hex(4)}")
    os.makedirs(home, mode=0o700)
    value = secrets.token_hex(12)
    with open(os.path.join(home, ".netrc"), "w") as f:
        f.write(f"machine api.wandb.ai login user password {value}\n")
    try:
        _, _, _, _, info = cuda1.step(f'''import torch
path = "/" + {home.lstrip("/")!r} + "/.netrc"
try:
    seen = "READ " + open(path).read()
except OSError as exc:
    seen = "errno " + str(exc.errno)
raise RuntimeError("SEEN " + seen + " on " + torch.cuda.get_device_name())
def solution(tensor):
    return tensor
''')
        assert "SEEN errno 2 on NVIDIA" in info["feedback"] and value not in info["feedback"], info["feedback"]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_cuda_extension_is_built_contained_and_runs(cuda1):
    _, _, _, _, info = cuda1.step(f'''import torch
from pkb_env.runtime import load_inline
_ext = load_inline("pkb_gpu_copy", cpp_sources="torch::Tensor copy(torch::Tensor x);", cuda_sources={COPY_EXTENSION!r},
                   functions=["copy"], extra_cuda_cflags=["-O3"])
def solution(tensor):
    return _ext.copy(tensor)
''')
    assert info["verdict"] == "correct", info["feedback"]
    assert info["record"].containment["filesystem"].startswith("allowlisted root")


def test_nvrtc_includes_of_secrets_are_refused_on_the_device(cuda1):
    _, _, _, _, info = cuda1.step('''from pkb_env.runtime import compile_cuda
compile_cuda('#include "/etc/shadow"\\nextern "C" __global__ void k() {}')
def solution(tensor):
    return tensor
''')
    assert info["verdict"] == "build_error" and "absolute paths and '..' are not allowed" in info["feedback"], \
        info["feedback"]


# Symmetric memory is set up in every rank as it starts (ranks/server.py, `symmetric`): a candidate writes a
# marker into symmetric buffers; the next candidate's uninitialised ones (torch's own and the runtime's, the
# same sizes) must not hold it.
MARKER = 0x5EC2E7_0BAD_C0DE
SYMMETRIC_WRITER = f'''import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from pkb_env.runtime import symmetric_buffer
own = symm_mem.empty(1 << 22, dtype=torch.int64, device="cuda")
symm_mem.rendezvous(own, dist.group.WORLD)
for made in (own, symmetric_buffer((1 << 22,), torch.int64).local):
    made.fill_({MARKER})
torch.cuda.synchronize()
def solution(tensor):
    return tensor.clone()
'''
SYMMETRIC_READER = f'''import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from pkb_env.runtime import symmetric_buffer
own = symm_mem.empty(1 << 22, dtype=torch.int64, device="cuda")
symm_mem.rendezvous(own, dist.group.WORLD)
found = [int((made == {MARKER}).sum()) for made in (own, symmetric_buffer((1 << 22,), torch.int64).local)]
raise RuntimeError(f"MARKERS {{found}}")
def solution(tensor):
    return tensor.clone()
'''


def test_a_candidate_cannot_reach_an_earlier_candidates_symmetric_memory(cuda1):
    facts = cuda1.unwrapped.client.run(lambda service: service.reference_facts())
    assert all("symmetric_s" in f for f in facts), facts   # the start set it up (not "unavailable")
    _, _, _, _, info = cuda1.step(SYMMETRIC_WRITER)
    assert info["verdict"] == "correct", info["feedback"]
    _, _, _, _, info = cuda1.step(SYMMETRIC_READER)
    assert "MARKERS [0, 0]" in info["feedback"], info["feedback"]
