"""A device-side start gate: a one-thread kernel that spins until the judge's release page holds an epoch.

Queued on the caller's stream before a burst, it holds the device at the start line while the host
queues nothing; the judge's single store releases every rank's device at once, so the start event
queued behind the gate marks the same instant on every GPU, and a host slower than its device shows
up as idle device time inside the burst (it is charged).

The page (gate.py) is mapped read-only in the rank; it is registered with CUDA as read-only mapped host
memory (with unified addressing the device reads it at the host address). The kernel is plain PTX,
loaded and launched through the driver API (libcuda, always present with the driver): no compiler and
no CuPy on the judge's path. A spinning kernel gives up after `TIMEOUT_NS` so that a judge that dies
mid-burst can never leave a device spinning; a rank whose device leaves the gate well after its host saw
the release stops using the gate (clocks.py).

Anything that fails here raises `GateUnavailable`; the rank then falls back to a host-side start (its
host polls the page and records the start event itself) and says so in its start-up facts.
"""
from __future__ import annotations

import ctypes

PTX = rb"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry pkb_gate(.param .u64 flag, .param .u32 epoch, .param .u64 timeout_ns)
{
    .reg .pred  %p<3>;
    .reg .b32   %r<3>;
    .reg .b64   %rd<6>;

    ld.param.u64        %rd1, [flag];
    ld.param.u32        %r1, [epoch];
    ld.param.u64        %rd2, [timeout_ns];
    mov.u64             %rd3, %globaltimer;
    add.u64             %rd4, %rd3, %rd2;
WAIT:
    ld.acquire.sys.global.u32 %r2, [%rd1];
    setp.ge.u32         %p1, %r2, %r1;
    @%p1 bra            DONE;
    mov.u64             %rd5, %globaltimer;
    setp.gt.u64         %p2, %rd5, %rd4;
    @%p2 bra            DONE;
    nanosleep.u32       64;
    bra.uni             WAIT;
DONE:
    ret;
}
"""
TIMEOUT_NS = 5_000_000_000
PAGE_BYTES = 4096
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_READ_ONLY = 0x08


class GateUnavailable(RuntimeError):
    """The device gate cannot be set up here; the message says which driver call failed."""


class DeviceGate:
    """The gate kernel, loaded in the current CUDA context, reading the page at host address `address`."""

    def __init__(self, address: int):
        try:
            self._cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise GateUnavailable(f"no CUDA driver library ({exc})") from None
        cuda = self._cuda
        context = ctypes.c_void_p()
        self._call("cuCtxGetCurrent", ctypes.byref(context))
        if not context.value:
            raise GateUnavailable("no current CUDA context in this thread")
        self._module = ctypes.c_void_p()
        self._call("cuModuleLoadData", ctypes.byref(self._module), ctypes.c_char_p(PTX))
        self._function = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(self._function), self._module, b"pkb_gate")
        flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY
        self._call(("cuMemHostRegister_v2", "cuMemHostRegister"), ctypes.c_void_p(address),
                   ctypes.c_size_t(PAGE_BYTES), ctypes.c_uint(flags))
        self._device_pointer = ctypes.c_uint64()
        self._call(("cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer"),
                   ctypes.byref(self._device_pointer), ctypes.c_void_p(address), ctypes.c_uint(0))
        self._launch = cuda.cuLaunchKernel
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        # The kernel's three parameters live here for the process's life; a launch copies them.
        self._flag = ctypes.c_uint64(self._device_pointer.value)
        self._epoch = ctypes.c_uint32(0)
        self._timeout = ctypes.c_uint64(TIMEOUT_NS)
        self._params = (ctypes.c_void_p * 3)(ctypes.addressof(self._flag), ctypes.addressof(self._epoch),
                                              ctypes.addressof(self._timeout))

    def launch(self, epoch: int, stream: int) -> None:
        """Queue the gate for `epoch` on the CUDA stream whose handle is `stream` (torch's `cuda_stream`)."""
        self._epoch.value = epoch
        result = self._launch(self._function, 1, 1, 1, 1, 1, 1, 0, ctypes.c_void_p(stream), self._params, None)
        if result != 0:
            raise RuntimeError(f"launching the start gate failed with CUDA error {result}")

    def _call(self, names: str | tuple[str, ...], *args) -> None:
        for name in (names,) if isinstance(names, str) else names:
            function = getattr(self._cuda, name, None)
            if function is not None:
                break
        else:
            raise GateUnavailable(f"the CUDA driver has no {names}")
        function.restype = ctypes.c_int
        result = function(*args)
        if result != 0:
            raise GateUnavailable(f"{function.__name__} failed with CUDA error {result}")
