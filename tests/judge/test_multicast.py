"""NVLink multicast never runs, whatever a candidate writes (issue 44 item 4); code is never loaded from files
(issue 42 item 1, the screen's part).

Every route a model-written kernel takes to multicast, in each spelling: the static screen refuses it before
anything runs (flag `multicast`); what is assembled at run time past the screen is refused by the compile
service (CPU ranks reach it: nvcc, NVRTC and extension requests are checked before any compiler starts); the
switches stay set in every process the judge starts, and a candidate that changes them at run time is caught
by the rank's tripwire. Then the loaders of code from files (flag `load_from_file`). Ordinary kernel code (the
experts, the references, TMA's cluster multicast) is not flagged.
"""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from pkb_env.contract.signature import reference_parameters
from pkb_env.judge.compile_checks import CompileRefused, check_sources
from pkb_env.sources import MULTICAST_TEXT, multicast_use
from pkb_env.judge.screen import screen_source
from pkb_env.judge.screen.strings import MAX_CHARS, Strings, TooLarge
from pkb_env.pool.fleet import ACTOR_ENV
from pkb_env.record import Severity
from pkb_env.runtime import COPY_CUDA, REDUCE_CUDA, SIGNAL_PAD_CUDA
from pkb_env.sandbox.variables import FORCED, MULTICAST_OFF, rank_environment

ROOT = Path(__file__).resolve().parents[2]
try:
    import cupy_backends.cuda.libs.nvrtc  # noqa: F401
    CUPY = True
except ImportError:
    CUPY = False
SOLUTION = "\n\ndef solution(tensor):\n    return tensor.clone()\n"
PTX = "multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];"


def screen(code: str):
    return screen_source(textwrap.dedent(code) + SOLUTION, ["tensor"])


def exploits(result) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for flag in result.flags:
        if flag.severity is Severity.EXPLOIT:
            found.setdefault(flag.code, []).append(flag.message)
    return found


# -- the static screen: every route, every spelling ----------------------------------------------------

MULTICAST = {
    # multimem PTX in any string constant (CUDA sources live in Python strings)
    "ptx_triple_quoted": f'SRC = r"""\nextern "C" __global__ void k(float* mc) {{\n  asm volatile("{PTX}");\n}}"""',
    "ptx_implicit_concatenation": 'SRC = ("asm volatile(\\"multi"\n'
                                  '       "mem.st.relaxed.sys.global.f32 [%0], %1;\\");")',
    "ptx_plus": 'SRC = "asm(\\"multi" + "mem.red.relaxed.sys.global.add.u32 [%0], 1;\\");"',
    "ptx_names_in_any_order": 'TAIL = "mem.st"\nHEAD = "multi"\nSRC = HEAD + TAIL',
    "ptx_augmented": 'SRC = "multi"\nSRC += "mem.ld_reduce"',
    "ptx_function_locals": 'def build():\n    a = "multi"\n    b = a + "mem"\n    return b',
    "ptx_fstring": 'OP = "ld_reduce"\nSRC = f"multi{\'mem\'}.{OP}.add.f32"',
    "ptx_join": 'SRC = "".join(["mul", "timem", ".st"])',
    "ptx_percent": 'SRC = "%s%s" % ("multi", "mem")',
    "ptx_format": 'SRC = "{}{}.st".format("multi", "mem")',
    "ptx_bytes": 'SRC = b"asm(\\"multimem.st.relaxed.sys.global.f32 [%0], %1;\\");"',
    "ptx_bytes_fromhex": 'SRC = bytes.fromhex("6d756c74696d656d").decode()',
    "ptx_base64": 'import base64\nSRC = base64.b64decode("bXVsdGltZW0=").decode()',
    "ptx_reversed": 'SRC = "tsmemitlum"[::-1]',
    "ptx_chr": 'SRC = chr(109) + chr(117) + "ltimem"',
    "ptx_upper_case": 'SRC = "MULTIMEM.LD_REDUCE"',
    "ptx_unknown_part_between": 'def build(x):\n    return "asm(\\"multi" + x + "mem.st\\");"',
    "triton_inline_asm": 'import triton.language as tl\n\ndef load(ptr):\n'
                         f'    return tl.inline_asm_elementwise("{PTX.replace("%0", "$0").replace("%1", "$1")}",'
                         ' "=f,l", [ptr], dtype=tl.float32, is_pure=False, pack=1)',
    # ThunderKittens (ParallelKittens): its barrier and multicast PGLs are multicast objects
    "tk_barrier": 'SRC = "struct globals { kittens::barrier_t<NUM_DEVICES> barrier; };"',
    "tk_multicast_pgl": 'SRC = "using layout = pgl<gl<bf16, -1, -1, -1, -1>, NUM_DEVICES, true>;"',
    # the driver's multicast objects: cuda-python, old and new spellings, by name, attribute, getattr, string
    "cuda_python_attribute": 'from cuda.bindings import driver\nerr, handle = driver.cuMulticastCreate(None)',
    "cuda_python_import": 'from cuda.bindings.driver import cuMulticastCreate',
    "cuda_python_aliased": 'import cuda.bindings.driver as drv\nf = drv.cuMulticastAddDevice',
    "cuda_python_old_module": 'from cuda import cuda\ncuda.cuMulticastBindMem(0, 0, 0, 0, 0, 0)',
    "cuda_python_v2": 'from cuda.bindings import driver\nh = driver.multicast_create(None)',
    "cuda_python_prop": 'from cuda.bindings import driver\np = driver.CUmulticastObjectProp()',
    "getattr_constant": 'from cuda.bindings import driver\nf = getattr(driver, "cuMulticastCreate")',
    "getattr_computed_on_driver": 'from cuda.bindings import driver\ndef f(n):\n    return getattr(driver, n)',
    "name_in_a_string": 'NAME = "cuMulticastCreate"',
    "granularity_in_c": 'SRC = "cuMulticastGetGranularity(&g, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED);"',
    "c_adjacent_literals": 'SRC = \'void* f = dlsym(h, "cuMulti" "castCreate");\'',
    "proc_address": 'from cuda.bindings import driver\nr = driver.cuGetProcAddress(b"cuMemMap", 12000, 0)',
    "driver_entry_point_in_c": 'SRC = "cudaGetDriverEntryPoint(\\"cuMemMap\\", &fn, 0, &q);"',
    # ctypes (and cffi) reaching the driver
    "ctypes_cdll": 'import ctypes\nlib = ctypes.CDLL("libcuda.so.1")',
    "ctypes_load_library": 'import ctypes\nlib = ctypes.cdll.LoadLibrary("libcuda.so")',
    "ctypes_loader_attribute": 'import ctypes\nlib = ctypes.cdll.libcuda',
    "ctypes_loader_subscript": 'import ctypes\nlib = ctypes.cdll["libcuda.so.1"]',
    "ctypes_aliased": 'from ctypes import CDLL as L\nlib = L("/usr/lib/x86_64-linux-gnu/libcuda.so.1")',
    "ctypes_find_library": 'from ctypes.util import find_library\npath = find_library("cuda")',
    "ctypes_runtime_library": 'import ctypes\nrt = ctypes.CDLL("libcudart.so.13")',
    "ctypes_computed_name": 'import ctypes\ndef load(name):\n    return ctypes.CDLL(name)',
    "cffi_dlopen": 'import cffi\nffi = cffi.FFI()\nlib = ffi.dlopen("libcuda.so.1")',
    "torch_driver_handle": 'import torch\nlib = torch.cuda._utils._get_gpu_runtime_library()',
    # torch's symmetric memory: the multicast pointer and the multimem ops
    "symm_mem_multicast_ptr": 'import torch.distributed._symmetric_memory as symm_mem\n'
                              'def f(t):\n    return symm_mem.rendezvous(t, "0").multicast_ptr',
    "symm_mem_getattr": 'def f(handle):\n    return getattr(handle, "multicast_ptr")',
    "symm_mem_multimem_op": 'import torch\ndef f(t):\n'
                            '    return torch.ops.symm_mem.multimem_all_reduce_(t, "sum", "0")',
    "symm_mem_one_shot": 'import torch\nop = torch.ops.symm_mem.multimem_one_shot_all_reduce',
    "nvshmem_mc_ptr": 'SRC = "void* p = nvshmemx_mc_ptr(NVSHMEM_TEAM_WORLD, buf);"',
    # the switches: NCCL, torch, NVSHMEM; by name, by value, by dict, removed, by a computed name, behind os.environ
    "env_subscript": 'import os\nos.environ["NCCL_NVLS_ENABLE"] = "1"',
    "env_value": 'import os\nos.environ["NCCL_ALGO"] = "NVLS"',
    "env_update_dict": 'import os\nos.environ.update({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"})',
    "env_update_keywords": 'import os\nos.environ.update(NVSHMEM_DISABLE_NVLS="0")',
    "env_putenv": 'import os\nos.putenv("NCCL_NVLS_ENABLE", "1")',
    "env_setdefault_alias": 'from os import environ as e\ne.setdefault("NCCL_NVLS_ENABLE", "1")',
    "env_deleted": 'import os\ndel os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"]',
    "env_popped": 'import os\nos.environ.pop("NVSHMEM_DISABLE_NVLS")',
    "env_computed_key": 'import os\ndef set_(k, v):\n    os.environ[k] = v',
    "env_computed_update": 'import os\nSETTINGS = {}\nos.environ.update(SETTINGS)',
    "env_cleared": 'import os\nos.environ.clear()',
    "env_libc_setenv": 'import ctypes\nlibc = ctypes.CDLL("libc.so.6")\nlibc.setenv(b"X", b"1", 1)',
}


@pytest.mark.parametrize("code", MULTICAST.values(), ids=MULTICAST.keys())
def test_every_route_to_multicast_is_refused(code):
    result = screen(code)
    found = exploits(result)
    assert "multicast" in found, (code, result.flags)
    flag = next(f for f in result.flags if f.code == "multicast")
    assert flag.line is not None and flag.message.startswith(f"line {flag.line}: ")


def test_the_message_says_what_to_do_instead():
    [message] = exploits(screen(MULTICAST["ptx_triple_quoted"]))["multicast"]
    assert message.startswith("line 3: multimem") and "multimem.ld_reduce" in message
    assert "NVLink multicast/NVLS is off on this machine" in message
    assert "use peer loads/stores" in message and "copy engine" in message


ORDINARY = {
    "tma_cluster_multicast": 'SRC = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes'
                             '.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"',
    "comment_in_cuda": 'SRC = """\n// a two-shot all-reduce: no multimem here, NVLS is off\n'
                       '/* cuMulticastCreate would need NVSwitch */\n__global__ void k() {}\n"""',
    "libc_by_name": 'import ctypes\nlibc = ctypes.CDLL("libc.so.6")',
    "own_symbols": 'import ctypes\nme = ctypes.CDLL(None)',
    "other_switches": 'import os\nos.environ["NCCL_ALGO"] = "Ring"\nos.environ.setdefault("NCCL_PROTO", "LL128")',
    "reads_environment": 'import os\nRANK = int(os.environ.get("RANK", "0"))\nALL = dict(os.environ)',
    "is_triton_there": 'import importlib.util\nHAS_TRITON = importlib.util.find_spec("triton") is not None',
    "multicast_query": 'import torch.distributed._symmetric_memory as symm_mem\n'
                       'def f(hdl):\n    return hdl.buffer_ptrs, hdl.signal_pad_ptrs',
    "pthread_barrier": 'SRC = "pthread_barrier_t b; cuda::barrier<cuda::thread_scope_block> bar;"',
    "tk_unicast_pgl": 'SRC = "using layout = pgl<gl<bf16, -1, -1, -1, -1>, NUM_DEVICES, false>;"',
    "variable_names": 'use_multicast = False\nmulticast = None',
    "docstring": '"""We could use NVLS multimem here; it is off on this machine, so peer loads."""',
}


@pytest.mark.parametrize("code", ORDINARY.values(), ids=ORDINARY.keys())
def test_ordinary_code_is_not_refused(code):
    result = screen(code)
    assert result.error is None and exploits(result) == {}, result.flags


def test_reading_the_environment_is_information_only():
    result = screen(ORDINARY["reads_environment"])
    assert {f.code for f in result.flags} == {"reads_environment"}
    assert all(f.severity is Severity.INFO for f in result.flags)


EXPERTS = sorted((ROOT / "solutions" / "experts").glob("*.py"))
REFERENCES = sorted((ROOT / "tasks").glob("*/reference.py"))
CANDIDATES = sorted((ROOT / "solutions" / "examples").glob("*.py"))


def test_experts_references_and_candidates_screen_clean():
    """Every expert, task reference and file candidate: no EXPLOIT flag (one test, the offenders listed)."""
    assert len(EXPERTS) >= 20 and len(REFERENCES) >= 80 and CANDIDATES
    offenders = {}
    for path in EXPERTS + REFERENCES + CANDIDATES:
        source = path.read_text()
        result = screen_source(source, reference_parameters(source))
        if result.error or exploits(result):
            offenders[str(path.relative_to(ROOT))] = result.error or exploits(result)
    assert not offenders, offenders


def test_the_runtimes_cuda_passes_the_compile_checks():
    for source in (SIGNAL_PAD_CUDA, COPY_CUDA, REDUCE_CUDA, SIGNAL_PAD_CUDA + REDUCE_CUDA + COPY_CUDA):
        check_sources([("the CUDA source", source)])
        assert multicast_use(source) is None


# -- the table and the string folding ---------------------------------------------------------------------

EXAMPLES = ["multimem.st", "cuMulticastCreate", "cudaMulticastObjectProp", "multicast_add_device", "hdl.mc_ptr",
            "multicast_ptr", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "barrier_t<8>",
            "pgl<gl<bf16>, 8, true>", "cuGetProcAddress_v2", "get_proc_address", "cudaGetDriverEntryPointByVersion"]


def test_every_pattern_of_the_table_is_found_by_an_example():
    """multicast_use passes over text holding none of its anchors: every pattern must be reachable."""
    hit = set()
    for example in EXAMPLES:
        found = multicast_use(f"x {example} y")
        assert found, example
        hit.add(found[0])
    assert hit == {what for what, _ in MULTICAST_TEXT}


def test_strings_leave_unknown_parts_empty_and_say_so():
    tree = ast.parse('A = "multi"\ndef f(x, A="no"):\n    return A + x + "mem"\nB = A + "mem"\n')
    strings = Strings(lambda node: None)
    strings.push(tree.body)
    assert strings.name("B").value == "multimem" and strings.name("B").complete
    f = tree.body[1]
    strings.push(f.body, ["x", "A"])   # the parameter A hides the module's A
    built = strings.text(f.body[0].value)
    assert built.value == "mem" and not built.complete


def test_strings_doubled_by_names_stop_at_a_bound():
    """A name doubled on every line: each string is cut at MAX_CHARS, and a module that builds more than BUDGET
    in all is not screened (an error naming why), so that screening stays cheap whatever a module does."""
    strings = Strings(lambda node: None)
    strings.push(ast.parse('A = "ab"\n' + "A = A + A\n" * 20).body)
    assert len(strings.name("A").value) == MAX_CHARS and not strings.name("A").complete
    with pytest.raises(TooLarge):
        Strings(lambda node: None).push(ast.parse('A = "ab"\n' + "A = A + A\n" * 40).body)
    result = screen('A = "ab"\n' + "A = A + A\n" * 40 + 'B = A + "multimem"\n')
    assert "too much to screen" in result.error


# -- the compile service: what was assembled at run time -------------------------------------------------

@pytest.mark.parametrize("source", [
    f'extern "C" __global__ void k(float* p) {{ float v; asm volatile("{PTX}" : "=f"(v) : "l"(p)); }}',
    '#include <cuda.h>\nvoid f() { CUmemGenericAllocationHandle h; CUmulticastObjectProp p{}; '
    'cuMulticastCreate(&h, &p); }',
    'void* f = dlsym(lib, "cuMulti" "castCreate");',
    '#define CREATE cuMulti##castCreate\nvoid f() { CREATE(0, 0); }',
    'asm volatile("MULTIMEM.ST.RELAXED.SYS.GLOBAL.F32 [%0], %1;" :: "l"(p), "f"(v));',
    'void f(void** fn) { cuGetProcAddress("cuMemMap", fn, 12000, 0, 0); }',
    'struct g { kittens::barrier_t<8> barrier; };',
])
def test_the_compile_service_refuses_multicast_sources(source):
    with pytest.raises(CompileRefused, match="refused .*NVLink multicast/NVLS is off on this machine"):
        check_sources([("the CUDA source", source)])


def test_the_compile_service_passes_cluster_multicast_and_comments():
    check_sources([("src", '// multimem would need NVSwitch\n/* cuMulticastCreate */\nextern "C" __global__ void '
                           'k() { asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx'
                           '::bytes.multicast::cluster [%0], [%1, {%2}], [%3], %4;" :: "r"(0), "l"(0), "r"(0), '
                           '"r"(0), "h"((short)1)); }')])


# chr() of a name and a generator: nothing the screen can fold; the compile service still sees the source.
ASSEMBLED = ('word = "".join(chr(c) for c in (109, 117, 108, 116, 105, 109, 101, 109))\n'
             'source = \'extern "C" __global__ void k(float* p) { float v; asm volatile("\' + word + '
             '\'.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(v) : "l"(p)); p[0] = v; }\'\n')


@pytest.mark.parametrize("backend", ["nvcc", "nvrtc"])
def test_a_source_assembled_at_run_time_is_refused_by_the_compile_service(judge2, backend):
    """Past the screen (it has no flag to raise), into compile_cubin in a rank: the service refuses it before any
    compiler starts (so this holds on machines with neither compiler)."""
    code = ("from pkb_env.runtime import compile_cubin\n" + ASSEMBLED +
            f"try:\n    compile_cubin(source, backend={backend!r}, arch='90')\n    outcome = 'COMPILED'\n"
            "except Exception as exc:\n    outcome = str(exc)\nraise RuntimeError('OUTCOME ' + outcome)\n" + SOLUTION)
    assert exploits(screen_source(code, ["tensor"])) == {}
    record = judge2.judge("all_reduce", code)
    feedback = record.feedback
    assert record.verdict.value == "build_error" and "COMPILED" not in feedback, feedback
    assert "OUTCOME the CUDA source: multimem" in feedback and "NVLink multicast/NVLS is off" in feedback, feedback


def test_an_extension_assembled_at_run_time_is_refused_by_the_compile_service(judge2):
    code = ("from pkb_env.runtime import load_inline\n" + ASSEMBLED +
            "try:\n    load_inline('pkb_mc_probe', cpp_sources='int f() { return 1; }', cuda_sources=source, "
            "functions=['f'])\n    outcome = 'BUILT'\nexcept Exception as exc:\n    outcome = str(exc)\n"
            "raise RuntimeError('OUTCOME ' + outcome)\n" + SOLUTION)
    assert exploits(screen_source(code, ["tensor"])) == {}
    feedback = judge2.judge("all_reduce", code).feedback
    assert "OUTCOME cuda_sources[0]: multimem" in feedback and "BUILT" not in feedback, feedback


IN_RANK = {
    "cupy_nvrtc": "from cupy.cuda import nvrtc\nnvrtc.createProgram(source, 'k.cu', [], [])",
    "cupy_nvrtc_header": "from cupy.cuda import nvrtc\nnvrtc.createProgram('#include \"h.cuh\"', 'k.cu', [source], "
                         "['h.cuh'])",
    "torch_nvrtc": "import torch.cuda._utils as u\nu._nvrtc_compile(source, 'k')",
    "torch_ptx": "import torch.cuda._utils as u\nu._cuda_load_module('.version 8.0\\n' + source)",
    "torch_jiterator": "from torch.cuda import jiterator\njiterator._create_jit_fn(source)",
    "runtime_cuda_module": "from pkb_env.runtime import CudaModule\nCudaModule(('.version 8.0\\n' + source).encode())",
}


@pytest.mark.skipif(not CUPY, reason="CuPy is not installed (its NVRTC bindings are one of the routes)")
def test_compilers_a_rank_runs_itself_refuse_what_was_assembled_at_run_time(judge2):
    """CuPy's NVRTC, torch's NVRTC, PTX loader and jiterator in the candidate's own rank, and the runtime's
    CudaModule given PTX: each refuses before compiling (so this holds on CPU ranks)."""
    attempts = "".join(f"try:\n{textwrap.indent(body, '    ')}\n    seen.append({name!r} + ' RAN')\n"
                       f"except Exception as exc:\n    seen.append({name!r} + ' ' + type(exc).__name__ + ': ' + "
                       f"str(exc)[:80])\n" for name, body in IN_RANK.items())
    code = ASSEMBLED + "seen = []\n" + attempts + "raise RuntimeError('SEEN ' + ' | '.join(seen))\n" + SOLUTION
    assert exploits(screen_source(code, ["tensor"])) == {}, screen_source(code, ["tensor"]).flags
    feedback = judge2.judge("all_reduce", code).feedback
    for name in IN_RANK:
        if name == "runtime_cuda_module":
            assert f"{name} TypeError: CudaModule takes a cubin" in feedback, feedback
        else:
            assert re.search(rf"{name} MulticastRefused: [^|]*multimem", feedback), (name, feedback)


@pytest.mark.skipif(not CUPY, reason="CuPy is not installed")
def test_putting_back_a_compiler_the_rank_wrapped_is_caught(judge2):
    code = ("import cupy_backends.cuda.libs.nvrtc as nvrtc\nnvrtc.createProgram = nvrtc.destroyProgram\n" + SOLUTION)
    record = judge2.judge("all_reduce", code)
    assert record.verdict.value == "flagged", record.feedback
    assert any("createProgram" in f.message for f in record.exploit_flags), record.exploit_flags


# -- the switches, in every process the judge starts ---------------------------------------------------

def test_every_process_gets_the_switches_and_nothing_overrides_them():
    assert MULTICAST_OFF == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                             "NVSHMEM_DISABLE_NVLS": "1"}
    assert MULTICAST_OFF.items() <= FORCED.items() and ACTOR_ENV.items() >= MULTICAST_OFF.items()
    env = rank_environment(extra={"NCCL_NVLS_ENABLE": "1", "NCCL_ALGO": "Ring"},
                           source={"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "PATH": "/usr/bin"})
    assert env.items() >= MULTICAST_OFF.items() and env["NCCL_ALGO"] == "Ring"


READ_SWITCHES = '''import ctypes, os
getenv = ctypes.CDLL(None).getenv
getenv.restype, getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]
seen = sorted((k, v, (getenv(k.encode()) or b"").decode()) for k, v in os.environ.items()
              if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_")))
raise RuntimeError("SWITCHES " + repr(seen))
'''


def _switches(feedback: str) -> dict[str, tuple[str, str]]:
    found = re.search(r"SWITCHES (\[.*?\])", feedback)
    assert found, feedback
    return {k: (v, c) for k, v, c in ast.literal_eval(found.group(1))}


def test_a_rank_runs_with_the_switches_set(judge2):
    """Read from inside a candidate rank on CPU ranks, in os.environ and in the C environment; reading the
    environment is an INFO flag only."""
    record = judge2.judge("all_reduce", READ_SWITCHES + SOLUTION)
    assert record.verdict.value == "build_error", record.feedback
    assert not record.exploit_flags and "reads_environment" in {f.code for f in record.flags}
    seen = _switches(record.feedback)
    for name, value in MULTICAST_OFF.items():
        assert seen[name] == (value, value), seen


# A build cell's switches: tests/sandbox/test_compile_containment.py::test_a_build_cell_runs_with_the_switches_set
# (one extension's initialiser serves that check and the containment one: each build is 40-50 s of CI).


# Past the screen on purpose (a computed name, a setter it cannot name): the tripwire is the line behind it.
FLIP_AT_RUN_TIME = {
    "through_os_environ": "import os\nsetter = type(os.environ).__setitem__\n"
                          "def flip(name):\n    setter(os.environ, name, '1')\n",
    "through_libc": "import ctypes\nlibc = ctypes.CDLL('libc.so.6')\n"
                    "setter = getattr(libc, 'set' + 'env')\n"
                    "def flip(name):\n    setter(name.encode(), b'1', 1)\n",
}


@pytest.mark.parametrize("route", FLIP_AT_RUN_TIME.values(), ids=FLIP_AT_RUN_TIME.keys())
def test_a_switch_flipped_at_run_time_is_caught_by_the_tripwire(judge2, route):
    code = (route + "NAME = ''.join(chr(c - 1) for c in "
            "(79, 68, 68, 77, 96, 79, 87, 77, 84, 96, 70, 79, 66, 67, 77, 70))\n\n"
            "def solution(tensor):\n    flip(NAME)\n    return tensor.clone()\n")
    assert exploits(screen_source(code, ["tensor"])) == {}, screen_source(code, ["tensor"]).flags
    record = judge2.judge("all_reduce", code)
    assert record.verdict.value == "flagged", record.feedback
    [flag] = [f for f in record.exploit_flags if f.code == "runtime_tampering"]
    assert "NVLink multicast's switch NCCL_NVLS_ENABLE" in flag.message, flag.message


# -- code loaded from files ---------------------------------------------------------------------------

LOADERS = {
    "spec_from_file_location": 'import importlib.util\n'
                               's = importlib.util.spec_from_file_location("e", "/x/agents/x.py")',
    "spec_aliased_module": 'from importlib import util as u\ns = u.spec_from_file_location("e", "x.py")',
    "spec_aliased_name": 'from importlib.util import spec_from_file_location as f\ns = f("e", "x.py")',
    "module_from_spec": 'import importlib.util\ndef load(spec):\n    return importlib.util.module_from_spec(spec)',
    "source_file_loader": 'from importlib.machinery import SourceFileLoader\nm = SourceFileLoader("e", "x.py")',
    "sourceless_file_loader": 'import importlib.machinery as m\nl = m.SourcelessFileLoader("e", "x.pyc")',
    "extension_file_loader": 'import importlib.machinery\nl = importlib.machinery.ExtensionFileLoader("e", "x.so")',
    "runpy_run_path": 'import runpy\nns = runpy.run_path("expert.py")',
    "runpy_run_module": 'import runpy\nns = runpy.run_module("pkb_env.agents.experts.all_reduce")',
    "runpy_dunder_import": 'ns = __import__("runpy").run_path("expert.py")',
    "imp_load_source": 'import imp\nm = imp.load_source("e", "expert.py")',
    "zipimport": 'import zipimport\nz = zipimport.zipimporter("x.zip")',
    "pkgutil_get_data": 'import pkgutil\nd = pkgutil.get_data("pkb_env", "agents/experts/all_reduce.py")',
    "pkgutil_resolve_name": 'import pkgutil\nf = pkgutil.resolve_name("pkb_env.agents.experts.all_reduce:solution")',
    "resources_files": 'import importlib.resources\nd = importlib.resources.files("pkb_env")',
    "resources_from": 'from importlib.resources import read_text\nt = read_text("pkb_env", "x.py")',
    "metadata_files": 'from importlib import metadata\nfs = metadata.files("pkb-env")',
    "marshal": 'import marshal\ncode = marshal.loads(b"")',
    "site_dir": 'import site\nsite.addsitedir("/x")',
    "sys_path_append": 'import sys\nsys.path.append("/x/agents/experts")',
    "sys_path_insert": 'import sys\nsys.path.insert(0, "/x")',
    "sys_path_extend_alias": 'import sys\npaths = sys.path\npaths.extend(["/x"])',
    "sys_path_assign": 'import sys\nsys.path = ["/x"] + sys.path',
    "sys_path_item": 'import sys\nsys.path[0] = "/x"',
    "sys_path_augmented": 'import sys\nsys.path += ["/x"]',
    "sys_path_setattr": 'import sys\nsetattr(sys, "path", ["/x"])',
    "sys_meta_path": 'import sys\nsys.meta_path.insert(0, object())',
    "package_file": 'import os, pkb_env.runtime\nroot = os.path.dirname(pkb_env.runtime.__file__)',
    "experts_folder": 'import os\np = os.path.join(os.sep, "work", "agents/experts", "all_reduce.py")',
    "solutions_folder": 'import os\np = os.path.join(os.sep, "work", "solutions/examples", "all_reduce_ring.py")',
    "solutions_package": 'import pkgutil\nd = pkgutil.get_data("pkb_env.solutions", "experts/all_reduce.py")',
}


@pytest.mark.parametrize("code", LOADERS.values(), ids=LOADERS.keys())
def test_loading_code_from_files_is_refused(code):
    result = screen(code)
    found = exploits(result)
    assert "load_from_file" in found, (code, result.flags)
    assert any("loading code from files is not allowed" in m for m in found["load_from_file"])


@pytest.mark.parametrize("code", ['exec(open("expert.py").read())',
                                  'code = compile(open("expert.py").read(), "expert.py", "exec")',
                                  'import importlib.util\ns = importlib.util.find_spec("pkb_env.agents.experts.x")'])
def test_running_a_files_text_is_refused_as_it_was(code):
    assert {"dynamic_code", "judge_import"} & set(exploits(screen(code))), screen(code).flags
