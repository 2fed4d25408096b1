"""What the screen looks for, as tables of names: protected modules, timers, collectives, process and memory
tricks (judge/screen/visitor.py walks the module against them)."""
from __future__ import annotations

import builtins
import re

from pkb_env.record import Severity

INFO, EXPLOIT = Severity.INFO, Severity.EXPLOIT
MAX_FLAGS = 50

# Module roots whose attributes a candidate may read but never assign (assigning = monkeypatching).
PROTECTED = {"torch", "time", "builtins", "sys", "os", "random", "numpy", "gc", "signal", "ctypes",
             "threading", "importlib", "inspect", "io", "pkb_env"}
TIMER_ATTRS = {"elapsed_time", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
               "monotonic_ns", "process_time", "synchronize", "record", "query", "wait", "Event"}
COLLECTIVES = {
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_coalesced",
    "all_gather_object", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "scatter",
    "scatter_object_list", "gather", "gather_object", "send", "recv", "isend", "irecv", "send_object_list",
    "recv_object_list", "batch_isend_irecv", "barrier", "monitored_barrier",
    # ProcessGroup methods and functional-collective ops reach the same NCCL kernels
    "allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced",
    "_allgather_base", "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base",
    "all_gather_into_tensor_coalesced", "all_to_all_single_autograd",
}
GC_SCAN = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
KILL = {"os.kill", "os.killpg", "signal.pthread_kill"}
TRACING = {"sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
           "threading.settrace_all_threads", "threading.setprofile_all_threads", "sys.addaudithook"}
FRAMES = {"sys._getframe", "sys._current_frames", "inspect.currentframe", "inspect.stack",
          "inspect.getouterframes", "inspect.trace"}
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame"}
CTYPES_MEMORY = {"ctypes.string_at", "ctypes.wstring_at", "ctypes.memmove", "ctypes.memset", "ctypes.cast"}
OPEN = {"builtins.open", "io.open", "os.open", "io.FileIO", "os.fdopen"}
ENV_READ = {"os.getenv", "os.getenvb"}
ENV_WRITE = {"os.putenv", "os.unsetenv", "os.environ.update", "os.environ.setdefault", "os.environ.pop",
             "os.environ.clear", "os.environ.popitem"}
SYS_MODULES_WRITE = {"sys.modules.update", "sys.modules.pop", "sys.modules.setdefault", "sys.modules.clear",
                     "sys.modules.popitem", "sys.modules.__setitem__", "sys.modules.__delitem__"}
MATH_MODE = {"torch.set_float32_matmul_precision", "torch.set_default_dtype", "torch.set_flush_denormal",
             "torch.set_default_tensor_type"}
SUBPROCESS = {"os.system", "os.popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "pty.spawn"}
DYNAMIC_CODE = {"builtins.exec", "builtins.eval", "builtins.compile"}
IMPORTERS = {"builtins.__import__", "importlib.import_module", "importlib.__import__"}
SETATTR = {"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__", "builtins.object.__delattr__",
           "builtins.type.__setattr__", "builtins.type.__delattr__"}
# Modules whose attributes a candidate has no business reaching by a computed name (getattr/vars):
# obfuscated access to them is how patches and process attacks hide from this screen.
SYSTEM_MODULES = {"os", "sys", "time", "signal", "ctypes", "gc", "builtins", "importlib", "inspect", "pkb_env",
                  "psutil", "subprocess", "threading", "multiprocessing"}
INTROSPECTION_ATTRS = {"__closure__", "cell_contents", "__defaults__", "__kwdefaults__", "__code__", "__globals__"}
PROC_PATHS = re.compile(r"(?<![\w.])/proc(?:/|$)|/dev/(?:k?mem|port)\b")
THREAD_MODULES = {"threading", "_thread", "concurrent"}
PROCESS_MODULES = {"multiprocessing", "subprocess", "torch.multiprocessing", "pty"}
BUILTIN_NAMES = set(dir(builtins))
