"""The judge's own tools inside a rank, taken before candidate code exists, and a check that they stayed put.

Timing and output capture run in the rank process, beside the candidate. The judge's code calls the
references held in `JUDGE` (bound when the zygote imports this module, before any fork), so patching
`time.perf_counter` or `torch.Tensor.clone` later changes nothing the judge uses; and `tampered()`,
run after every candidate call, compares the public attributes with those originals, so a candidate that
patches them anyway (for its own benefit or to mislead the judge) is caught and flagged. It is one layer:
the static screen rejects the plain and the obfuscated forms it can see; process isolation limits what a
candidate can reach at all.

NVLink multicast's switches (sandbox/variables.py MULTICAST_OFF) are watched the same way: the values this
process started with, in os.environ and in the C environment the libraries read (libc's getenv: a setenv
through ctypes changes that one alone). A candidate that changes one is caught after the call that did it; a
library that read the changed value during that call (torch's symmetric memory reads it at every rendezvous)
has already acted on it, which is why the screen refuses such writes before anything runs.
"""
from __future__ import annotations

import ctypes
import os
import time
from multiprocessing.connection import Connection
from types import SimpleNamespace

import torch
import torch.distributed as dist

from pkb_env.sandbox.variables import MULTICAST_OFF
from pkb_env.wire import channel

JUDGE = SimpleNamespace(
    clock=time.perf_counter,
    monotonic=time.monotonic,
    clone=torch.Tensor.clone,
    detach=torch.Tensor.detach,
    to=torch.Tensor.to,
    equal=torch.equal,
    barrier=dist.barrier,
    all_reduce=dist.all_reduce,
    synchronize=torch.cuda.synchronize,
    event=torch.cuda.Event,
    record=torch.cuda.Event.record,
    event_synchronize=torch.cuda.Event.synchronize,
    elapsed_time=torch.cuda.Event.elapsed_time,
    send=channel.send,
    send_bytes=Connection.send_bytes,
    pack=channel.pack_tensors,
)

# (owner, attribute) pairs whose value must still be the original after a candidate call.
WATCHED = [(time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "time"),
           (torch.Tensor, "clone"), (torch.Tensor, "detach"), (torch.Tensor, "to"), (torch.Tensor, "copy_"),
           (torch, "equal"), (torch.cuda, "synchronize"), (torch.cuda, "Event"),
           (torch.cuda.Event, "record"), (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
           (dist, "barrier"), (dist, "all_reduce"), (channel, "send"), (channel, "recv"),
           (channel, "pack_tensors"), (Connection, "send_bytes"), (Connection, "recv_bytes")]
_ORIGINAL = [(owner, name, owner.__dict__.get(name, getattr(owner, name))) for owner, name in WATCHED]
_JUDGE_TOOLS = dict(vars(JUDGE))
_getenv = ctypes.CDLL(None).getenv
_getenv.restype, _getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]


def _switches() -> dict[str, tuple[str | None, bytes | None]]:
    """NVLink multicast's switches as Python and as the C libraries see them."""
    return {name: (os.environ.get(name), _getenv(name.encode())) for name in MULTICAST_OFF}


_SWITCHES = _switches()


def watch(owner: object, *names: str) -> None:
    """Add the judge's own classes and modules (the rank server) to the watch list."""
    for name in names:
        _ORIGINAL.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))


def tampered(*instances: object) -> list[str]:
    """Names of watched attributes that no longer hold their originals (or instance-level overrides)."""
    found = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name, original in _ORIGINAL
             if owner.__dict__.get(name, getattr(owner, name, None)) is not original]
    found += [f"judge tool {k}" for k, v in _JUDGE_TOOLS.items() if vars(JUDGE).get(k) is not v]
    found += [f"NVLink multicast's switch {k} in the environment" for k, v in _switches().items() if v != _SWITCHES[k]]
    for instance in instances:
        overrides = [k for k, v in getattr(instance, "__dict__", {}).items() if k in _METHOD_NAMES and callable(v)]
        found += [f"{type(instance).__name__}().{k}" for k in overrides]
    return found


_METHOD_NAMES = {"send_bytes", "recv_bytes", "send", "recv", "poll", "burst", "trials", "fingerprints", "replay",
                 "check_tools"}
