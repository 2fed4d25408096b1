"""What the screen looks for, as tables of names: protected modules, timers, collectives, process and memory
tricks, NVLink multicast, code loaded from files (judge/screen/visitor.py walks the module against them)."""
from __future__ import annotations

import builtins
import re

from pkb_env.sources import MULTICAST_FIX, MULTICAST_TEXT, multicast_use  # noqa: F401 (the screen's)
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

# -- NVLink multicast (NVLS). What asks for it in text (strings, names) is pkb_env/sources.py's table, which the
# compile service uses too; these are the Python routes around it: the driver reached by name, and the switches.
# A shared library of the CUDA driver or runtime, named to ctypes/cffi (cuMulticastCreate is one symbol away).
DRIVER_LIBRARY = re.compile(r"(?:^|/|\blib)(?:cuda|cudart|nvidia[\w-]*)(?:\.so|\.dll|\b|$)", re.IGNORECASE)
# Loaders of shared libraries, by the callee's last name (ctypes.CDLL, cdll.LoadLibrary, ffi.dlopen, ...).
LIBRARY_LOADERS = {"CDLL", "PyDLL", "LoadLibrary", "dlopen", "find_library", "load_library"}
LIBRARY_HANDLES = {"ctypes.cdll", "ctypes.pydll"}   # ctypes.cdll.libcuda, ctypes.cdll["libcuda.so.1"] load by name
DRIVER_HANDLES = {"torch.cuda._utils._get_gpu_runtime_library"}   # torch's ctypes handle on libcuda
# cuda-python's driver and runtime: reached by a computed name, they hide which function is called.
DRIVER_MODULES = ("cuda.bindings.driver", "cuda.bindings.runtime", "cuda.bindings._v2", "cuda.cuda", "cuda.cudart",
                  "cuda.core")
# The environment: NCCL_NVLS_ENABLE, TORCH_SYMM_MEM_DISABLE_MULTICAST and NVSHMEM_DISABLE_NVLS are forced on every
# process the judge starts (sandbox/variables.py) and read by the libraries when they set up (torch's symmetric
# memory at every rendezvous). Writing one is refused by its name (the table); a variable written or removed by
# a computed name could be one of them, and so could all of them (clear, popitem, libc's setenv behind os.environ).
ENV_KEYED = {"os.putenv", "os.unsetenv", "os.environ.setdefault", "os.environ.pop", "os.environ.__setitem__",
             "os.environ.__delitem__", "os.environb.setdefault", "os.environb.pop", "os.environb.__setitem__",
             "os.environb.__delitem__"}
ENV_MAPPING = {"os.environ.update", "os.environb.update"}
ENV_ALL = {"os.environ.clear", "os.environ.popitem", "os.environb.clear", "os.environb.popitem"}
LIBC_ENV = {"setenv", "putenv", "unsetenv", "clearenv"}   # ctypes.CDLL("libc.so.6").setenv(...)

# -- Code loaded from files: an expert solution read from disk is an answer key (docs/threat_model.md). Every call
# into these modules, or of these names, whatever its arguments (exec/eval/compile of a file's text: DYNAMIC_CODE).
LOAD_FROM_FILE_MODULES = ("runpy", "imp", "zipimport", "pkgutil", "marshal", "site", "modulefinder",
                          "importlib.machinery", "importlib.resources", "importlib.metadata", "importlib.abc",
                          "importlib.readers", "importlib.simple", "importlib._bootstrap",
                          "importlib._bootstrap_external")
LOAD_FROM_FILE = {"importlib.util.spec_from_file_location", "importlib.util.spec_from_loader",
                  "importlib.util.module_from_spec", "importlib.util.LazyLoader", "importlib.find_loader"}
# Where `import` looks: writing these lets an import reach any folder (the experts' included).
IMPORT_PATHS = {"sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache"}
IMPORT_PATH_WRITES = {"append", "insert", "extend", "__setitem__", "__iadd__", "update", "setdefault"}
# A module's file or folder: the way from pkb_env to the files beside it.
MODULE_FILE_ATTRS = {"__file__", "__path__", "__spec__", "__loader__", "__cached__"}
ANSWER_KEY_PATHS = re.compile(r"(?:agents|solutions)[/\\.](?:experts|candidates|examples)\b|[/\\]experts[/\\]\w+\.py",
                              re.IGNORECASE)
LOAD_FROM_FILE_FIX = "loading code from files is not allowed (an expert solution read from disk is an answer key)"
