"""screen_source: signature checks, exploit flags (with aliases resolved), and no flags on ordinary code."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pkb_env.contract.signature import reference_parameters
from pkb_env.judge.screen import screen_source
from pkb_env.record import Severity

TASKS = Path(__file__).resolve().parents[2] / "tasks"
SOLUTION = "\n\ndef solution(tensor):\n    return tensor.clone()\n"


def screen(code: str, parameters=("tensor",), collectives_allowed: bool = True, add_solution: bool = True):
    code = textwrap.dedent(code)
    return screen_source(code + (SOLUTION if add_solution else ""), list(parameters), collectives_allowed)


def codes(result, severity: Severity | None = None) -> set[str]:
    return {f.code for f in result.flags if severity is None or f.severity is severity}


def exploits(result) -> set[str]:
    return codes(result, Severity.EXPLOIT)


# -- references and signatures ---------------------------------------------------------------------

@pytest.mark.parametrize("reference", sorted(TASKS.glob("*/reference.py")), ids=lambda p: p.parent.name)
def test_every_reference_passes_without_exploit_flags(reference):
    source = reference.read_text()
    params = reference_parameters(source)
    result = screen_source(source, params)
    assert result.error is None and exploits(result) == set(), result.flags
    assert result.parameters == params


def test_all_reduce_reference():
    source = (TASKS / "all_reduce" / "reference.py").read_text()
    assert reference_parameters(source) == ["tensor"]
    result = screen_source(source, ["tensor"])
    assert codes(result) == {"uses_collectives"}
    assert "torch.distributed.all_reduce" in result.flags[0].message and result.flags[0].line == 8
    forbidden = screen_source(source, ["tensor"], collectives_allowed=False)
    assert exploits(forbidden) == {"forbidden_collective"}


def test_reference_parameters_needs_a_def():
    with pytest.raises(ValueError, match="def solution"):
        reference_parameters("solution = lambda x: x\n")


def test_syntax_error_names_line_and_text():
    result = screen_source("import torch\n\ndef solution(x)\n    return x\n", ["x"])
    assert result.error.startswith("syntax error at line 3") and "def solution(x)" in result.error


def test_missing_solution_names_the_fix():
    result = screen_source("import torch\n\ndef solve(x):\n    return x\n", ["x", "y"])
    assert "no top-level `solution`" in result.error and "def solution(x, y)" in result.error


def test_nested_solution_does_not_count():
    result = screen_source("def outer():\n    def solution(x):\n        return x\n", ["x"])
    assert "no top-level" in result.error


def test_async_solution_is_an_error():
    result = screen_source("async def solution(x):\n    return x\n", ["x"])
    assert "async def" in result.error


def test_class_named_solution_is_an_error():
    assert "class" in screen_source("class solution:\n    pass\n", ["x"]).error


def test_too_few_parameters():
    result = screen_source("def solution(a):\n    return a\n", ["a", "b"])
    assert "takes 1 positional parameter" in result.error and "def solution(a, b)" in result.error


def test_too_many_required_parameters():
    result = screen_source("def solution(a, b, c):\n    return a\n", ["a", "b"])
    assert "requires 3 positional parameters (a, b, c)" in result.error


def test_extra_parameters_with_defaults_and_varargs_are_fine():
    assert screen_source("def solution(a, b, block=256):\n    return a\n", ["a", "b"]).error is None
    result = screen_source("def solution(*args):\n    return args[0]\n", ["a", "b"])
    assert result.error is None and result.parameters == []


def test_required_keyword_only_is_an_error():
    assert "keyword-only" in screen_source("def solution(a, *, scale):\n    return a\n", ["a"]).error


def test_renamed_parameters_are_info():
    result = screen_source("def solution(x, y):\n    return x\n", ["input", "weight"])
    assert result.error is None and codes(result) == {"parameter_names"}
    assert result.parameters == ["x", "y"]


def test_last_definition_wins():
    code = "def solution(a, b):\n    return a\n\ndef solution(a):\n    return a\n"
    assert screen_source(code, ["a"]).error is None
    assert screen_source(code, ["a", "b"]).error is not None


@pytest.mark.parametrize("code, error", [
    ("solution = lambda tensor: tensor\n", None),
    ("solution = lambda a, b, c: a\n", "requires 3"),
    ("def _impl(tensor):\n    return tensor\n\nsolution = _impl\n", None),
    ("import torch\n\ndef _impl(tensor):\n    return tensor\n\nsolution = torch.compile(_impl)\n", None),
    ("solution = None\n", "constant"),
    ("from mylib import solution\n", "imported"),
])
def test_assigned_solution_is_info(code, error):
    result = screen_source(code, ["tensor"])
    if error is None:
        assert result.error is None and "solution_assigned" in codes(result, Severity.INFO)
    else:
        assert error in result.error


def test_flags_survive_a_missing_solution():
    result = screen_source("import time\ntime.perf_counter = lambda: 0.0\n", ["x"])
    assert result.error and exploits(result) == {"monkeypatch"}


# -- exploit patterns ------------------------------------------------------------------------------

EXPLOITS = [
    ("monkeypatch", "import torch\ntorch.cuda.Event.elapsed_time = lambda self, other: 1e-9\n"),
    ("monkeypatch", "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("monkeypatch", "import time as t\nt.perf_counter_ns = lambda: 0\n"),
    ("monkeypatch", "from torch.cuda import Event\nEvent.elapsed_time = lambda s, o: 0.0\n"),
    ("monkeypatch", "import torch\nE = torch.cuda.Event\nE.elapsed_time = lambda s, o: 0.0\n"),
    ("monkeypatch", "import torch\nsetattr(torch.cuda.Event, 'elapsed_time', lambda s, o: 0.0)\n"),
    ("monkeypatch", "import torch\ndef solution(tensor):\n    torch.cuda.synchronize = lambda: None\n"
                    "    return tensor\n"),
    ("monkeypatch", "import torch.distributed as dist\ndist.all_reduce = lambda t, **k: None\n"),
    ("monkeypatch", "import torch\ntorch.Tensor.clone = lambda self: self\n"),
    ("monkeypatch", "import builtins\nbuiltins.print = lambda *a: None\n"),
    ("monkeypatch", "__builtins__['open'] = None\n"),
    ("monkeypatch", "import random\nrandom.random = lambda: 0.5\n"),
    ("monkeypatch", "import numpy as np\nnp.allclose = lambda *a, **k: True\n"),
    ("monkeypatch", "import os\nos.getpid = lambda: 1\n"),
    ("monkeypatch", "import sys\nsys.exit = lambda *a: None\n"),
    ("monkeypatch", "import time\ntime.__dict__['time'] = lambda: 0\n"),
    ("monkeypatch", "import time\ndel time.perf_counter\n"),
    ("monkeypatch", "__import__('time').perf_counter = lambda: 0\n"),
    ("monkeypatch", "import torch\ngetattr(torch, 'cuda').Event.elapsed_time = None\n"),
    ("monkeypatch", "from unittest import mock\nmock.patch('time.perf_counter', return_value=0).start()\n"),
    ("monkeypatch", "import torch\ntype(torch.cuda.Event()).elapsed_time = lambda s, o: 0.0\n"),
    ("monkeypatch", "import torch\ntorch.cuda.Event(enable_timing=True).__class__.record = None\n"),
    ("gc_scan", "import gc\nobjs = gc.get_objects()\n"),
    ("gc_scan", "import gc\ndef solution(tensor):\n    return gc.get_referrers(tensor)\n"),
    ("gc_scan", "from gc import get_objects as go\nx = go()\n"),
    ("gc_scan", "x = __import__('gc').get_objects()\n"),
    ("proc_access", "maps = open('/proc/self/maps').read()\n"),
    ("proc_access", "import os\npid = os.getpid()\nmem = open(f'/proc/{pid}/mem', 'rb')\n"),
    ("proc_access", "f = open('/dev/mem', 'rb')\n"),
    ("process_kill", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"),
    ("process_kill", "import os\nos.killpg(0, 9)\n"),
    ("process_kill", "import signal, threading\nsignal.pthread_kill(threading.main_thread().ident, 9)\n"),
    ("process_kill", "from os import kill\nkill(1, 9)\n"),
    ("sys_modules", "import sys\nsys.modules['torch.distributed'] = object()\n"),
    ("sys_modules", "import sys\nsys.modules.pop('time')\n"),
    ("sys_modules", "import sys\nsys.modules['__main__'].TIMER = None\n"),
    ("sys_modules", "import sys\ndel sys.modules['torch']\n"),
    ("tracing", "import sys\nsys.settrace(lambda *a: None)\n"),
    ("tracing", "import sys\nsys.setprofile(lambda *a: None)\n"),
    ("tracing", "import threading\nthreading.settrace(lambda *a: None)\n"),
    ("module_reload", "import importlib, torch\nimportlib.reload(torch)\n"),
    ("module_reload", "from importlib import reload\nimport time\nreload(time)\n"),
    ("judge_import", "import pkb_env\n"),
    ("judge_import", "from pkb_env.judge import compare\n"),
    ("judge_import", "from pkb_env import record\n"),
    ("judge_import", "import pkb_env.executors.cpu as ex\n"),
    ("judge_import", "import importlib\nm = importlib.import_module('pkb_env.judge.compare')\n"),
    ("judge_import", "m = __import__('pkb_env.task')\n"),
    ("judge_import", "import pkb_env.runtime\nx = pkb_env.judge\n"),
    ("judge_import", "from . import secrets\n"),
    ("reference_import", "from pkb_env.tasks.all_reduce.reference import solution as ref\n"),
    ("reference_import", "import tasks.all_reduce.reference\n"),
    ("reference_import", "from reference import solution as ref\n"),
    ("ctypes_memory", "import ctypes\nb = ctypes.string_at(0x7f0000000000, 4096)\n"),
    ("ctypes_memory", "import ctypes\nctypes.memmove(1, 2, 3)\n"),
    ("ctypes_memory", "import ctypes as C\np = C.cast(1, C.POINTER(C.c_float))\n"),
    ("ctypes_memory", "import ctypes\nbuf = (ctypes.c_char * 16).from_address(1234)\n"),
    ("frame_inspection", "import sys\ncaller = sys._getframe(1).f_locals\n"),
    ("frame_inspection", "import inspect\nframes = inspect.stack()\n"),
    # obfuscation: what the adversarial suite used to get past an earlier version of this screen
    ("dynamic_code", "exec('x = 1')\n"),
    ("dynamic_import", "import importlib\nname = 'cu' + 'py'\nm = importlib.import_module(name)\n"),
    ("dynamic_import", "t = __import__('ti' + 'me')\n"),
    ("dynamic_attribute", "import os\ngetattr(os, 'ki' + 'll')(1, 9)\n"),
    ("dynamic_attribute", "import time\nvars(time)['perf_counter'] = lambda: 0.0\n"),
    ("sys_modules", "import sys\nrank = sys.modules['pkb_env.executors.' + 'rank']\n"),
    ("introspection", "def f(x=1):\n    return x\nf.__defaults__ = (2,)\n"),
    ("introspection", "def g():\n    return 1\ncell = g.__closure__\n"),
    ("process_control", "import psutil\n"),
]


@pytest.mark.parametrize("code, flag", [(c, f) for f, c in EXPLOITS], ids=[f"{f}-{i}" for i, (f, _) in
                                                                            enumerate(EXPLOITS)])
def test_exploit_is_flagged(code, flag):
    result = screen(code)
    assert flag in exploits(result), (code, result.flags)
    hit = next(f for f in result.flags if f.code == flag)
    assert hit.line is not None and hit.message.startswith(f"line {hit.line}: ")


def test_timer_patch_message():
    result = screen("import torch\n\ntorch.cuda.Event.elapsed_time = lambda s, o: 0.0\n")
    [flag] = result.flags
    assert flag.message == ("line 3: assigns torch.cuda.Event.elapsed_time "
                            "(monkeypatching the timer is not allowed)")
    assert flag.line == 3 and flag.severity is Severity.EXPLOIT


def test_aliases_of_distributed_are_resolved():
    for imp, call in [("import torch.distributed as dist", "dist.all_gather_into_tensor(o, t)"),
                      ("from torch import distributed as d", "d.reduce_scatter_tensor(o, t)"),
                      ("from torch.distributed import broadcast", "broadcast(t, src=0)"),
                      ("import torch", "torch.distributed.send(t, 1)"),
                      ("import torch.distributed as dist", "dist.group.WORLD.allreduce([t])"),
                      ("import torch", "torch.ops._c10d_functional.all_reduce_(t, 'sum', '0')"),
                      ("import torch.distributed._functional_collectives as fc", "fc.all_reduce(t, 'sum', [0])")]:
        code = f"{imp}\n\ndef solution(tensor):\n    o = t = tensor\n    {call}\n    return o\n"
        allowed = screen_source(code, ["tensor"])
        assert codes(allowed) == {"uses_collectives"}, (imp, allowed.flags)
        assert exploits(screen_source(code, ["tensor"], collectives_allowed=False)) == {"forbidden_collective"}


def test_alias_inside_a_function_scope():
    code = ("def solution(tensor):\n    import time as clock\n    clock.perf_counter = lambda: 0\n"
            "    return tensor\n")
    assert exploits(screen_source(code, ["tensor"])) == {"monkeypatch"}


def test_docstring_mentioning_proc_is_not_flagged():
    result = screen('"""We never read /proc/self/mem here."""\n')
    assert exploits(result) == set()


# -- info flags ------------------------------------------------------------------------------------

INFOS = [
    ("threads", "import threading\nt = threading.Thread(target=print)\n"),
    ("threads", "from concurrent.futures import ThreadPoolExecutor\n"),
    ("subprocess", "import subprocess\nsubprocess.run(['nvidia-smi'])\n"),
    ("subprocess", "import multiprocessing as mp\n"),
    ("subprocess", "import os\nos.system('nvidia-smi')\n"),
    ("broad_except", "try:\n    import cupy\nexcept Exception:\n    cupy = None\n"),
    ("broad_except", "try:\n    x = 1\nexcept:\n    x = 2\n"),
    ("broad_except", "try:\n    x = 1\nexcept (ValueError, BaseException):\n    x = 2\n"),
    ("reads_environment", "import os\nrank = int(os.environ['RANK'])\n"),
    ("reads_environment", "import os\nws = os.getenv('WORLD_SIZE')\n"),
    ("sets_environment", "import os\nos.environ['NCCL_ALGO'] = 'ring'\n"),
    ("file_access", "src = open('kernel.cu').read()\n"),
    ("sleeps", "import time\ntime.sleep(0.01)\n"),
    ("sleeps", "from time import sleep\nsleep(0)\n"),
    ("ctypes", "import ctypes\nlib = ctypes.CDLL('libc.so.6')\n"),
    ("changes_math_mode", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("changes_math_mode", "import torch\ntorch.set_float32_matmul_precision('high')\n"),
    ("changes_config", "import torch._dynamo\ntorch._dynamo.config.cache_size_limit = 64\n"),
]


@pytest.mark.parametrize("code, flag", [(c, f) for f, c in INFOS], ids=[f"{f}-{i}" for i, (f, _) in
                                                                         enumerate(INFOS)])
def test_info_is_flagged_and_not_exploit(code, flag):
    result = screen(code)
    assert flag in codes(result, Severity.INFO), (code, result.flags)
    assert exploits(result) == set(), result.flags


def test_info_flags_are_reported_once_per_subject():
    code = ("import torch.distributed as dist\n\ndef solution(tensor):\n"
            + "    dist.all_reduce(tensor)\n" * 5 + "    dist.broadcast(tensor, 0)\n    return tensor\n")
    result = screen_source(code, ["tensor"])
    assert [f.line for f in result.flags] == [4, 9]


# -- legitimate code is not flagged ----------------------------------------------------------------

LEGIT = [
    # a local variable named time, and timing the candidate's own code
    "import time\n\ndef bench(f):\n    t0 = time.perf_counter()\n    f()\n    return time.perf_counter() - t0\n",
    "import time\nfrom types import SimpleNamespace\n\ndef stats():\n    time = SimpleNamespace()\n"
    "    time.perf_counter = 0.5\n    return time\n",
    "def elapsed(t0, t1):\n    time = t1 - t0\n    return time\n",
    # tensor attribute assignment is tensor code, not monkeypatching
    "import torch\n\ndef fill(out, src):\n    out.data = src\n    out.grad = None\n    return out\n",
    # helper functions, classes, module constants
    "import torch\n\nBLOCK = 1024\nDTYPES = {torch.float32: 'f32'}\n\n"
    "def _chunks(n, k=BLOCK):\n    return [(i, min(i + k, n)) for i in range(0, n, k)]\n",
    "import torch\n\nclass Ring:\n    def __init__(self, world):\n        self.world = world\n"
    "        self.buffers = {}\n\n    def step(self, i):\n        self.pos = (i + 1) % self.world\n"
    "        return self.pos\n",
    # torch.compile and cupy
    "import torch\n\n@torch.compile(mode='max-autotune-no-cudagraphs')\ndef fused(a, b):\n    return a * b + 1\n",
    "import cupy as cp\n\nKERNEL = cp.RawKernel(r'''\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n''',"
    " 'k')\n",
    "try:\n    import cupy as cp\nexcept ImportError:\n    cp = None\n",
    # triton kernels, events for its own timing, streams
    "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def add(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, 1.0, mask=offs < n)\n",
    "import torch\n\ndef timed(f):\n    start = torch.cuda.Event(enable_timing=True)\n"
    "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n    f()\n    end.record()\n"
    "    torch.cuda.synchronize()\n    return start.elapsed_time(end)\n",
    "import torch\nSIDE = None\n\ndef get_stream():\n    global SIDE\n    SIDE = SIDE or torch.cuda.Stream()\n"
    "    return SIDE\n",
    # the runtime candidates may use; symmetric memory; ctypes-free pointer arithmetic
    "import pkb_env.runtime as rt\nfrom pkb_env.runtime import symm_mem_buffer\nfrom pkb_env import runtime\n",
    "import torch.distributed._symmetric_memory as symm_mem\n\ndef alloc(t):\n"
    "    return symm_mem.empty(t.shape, dtype=t.dtype, device=t.device)\n",
    "import torch\n\ndef view(t):\n    ptr = t.data_ptr()\n    return ptr + t.element_size() * t.numel()\n",
    # strings that merely resemble paths, parameters shadowing module names
    "NAME = 'gpu/processing'\nPATH = '/tmp/process_group'\n",
    "import torch.distributed as dist\n\ndef f(dist, x):\n    dist.value = x\n    return dist\n",
    # an except that re-raises is not a fallback
    "def load():\n    try:\n        import cupy\n    except Exception as exc:\n"
    "        raise RuntimeError('needs cupy') from exc\n    return cupy\n",
    "import random\n\ndef shuffled(xs, seed):\n    rng = random.Random(seed)\n    rng.shuffle(xs)\n    return xs\n",
]


@pytest.mark.parametrize("code", LEGIT, ids=[f"legit-{i}" for i in range(len(LEGIT))])
def test_legit_code_is_not_flagged_as_exploit(code):
    result = screen(code)
    assert result.error is None, result.error
    assert exploits(result) == set(), result.flags


def test_allow_tf32_is_info_only():
    result = screen("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
                    "torch.backends.cudnn.allow_tf32 = True\n")
    assert codes(result) == {"changes_math_mode"} and len(result.flags) == 2
    assert all(f.severity is Severity.INFO for f in result.flags)


def test_plain_ordinary_module_has_no_flags_at_all():
    code = ("import math\nimport torch\n\nSCALE = 1 / math.sqrt(2)\n\n"
            "def solution(tensor):\n    out = torch.empty_like(tensor)\n    out.copy_(tensor * SCALE)\n"
            "    return out\n")
    assert screen_source(code, ["tensor"]).flags == []


def test_except_that_reraises_is_not_a_fallback():
    reraise = "try:\n    import cupy\nexcept Exception as exc:\n    raise ImportError('cupy') from exc\n"
    fallback = "try:\n    import cupy\nexcept Exception:\n    cupy = None\n"
    assert "broad_except" not in codes(screen(reraise))
    [flag] = [f for f in screen(fallback).flags if f.code == "broad_except"]
    assert flag.line == 3 and "except Exception" in flag.message
