"""The process group of candidates on emulated and CPU ranks: gloo's transport in NCCL's forms, CUDA tensors
staged through host memory.

Why it exists: on `cuda-emulated` several rank processes share one GPU, NCCL refuses two ranks on one GPU,
and a plain gloo group hands a tensor's address to its sockets. For a CUDA tensor that is a device address:
`dist.isend`/`dist.irecv` of one failed in `writev` ("Bad address") and gloo aborted every rank, so every
correct ring, halo or pairwise exchange was judged a runtime error (issue 31; docs/multi_gpu.md,
"Point-to-point on emulated ranks"). This group gives candidates NCCL's contract on CUDA tensors over gloo's host transport.

Why this design, of the two on offer:
- chosen: stage each operation's CUDA tensors through host memory and run the same gloo operation on the host
  copies. One code path serves every point-to-point op and every collective, those the references use today
  and any a candidate calls; nothing outlives an operation (no buffer, handle or cache passes from call to
  call, let alone from candidate to candidate: every candidate rank set is a fresh fork); and the staging can
  be exercised on CPU ranks (`stage="cpu"` stages host tensors alike), so CI covers the logic. The copies cost
  time, and emulated ranks time nothing (they time-slice one GPU).
- not chosen: CUDA IPC between the ranks sharing a GPU (device-to-device copies through exported memory
  handles). Faster, but it needs a handle exchange per buffer, a cache of opened handles per peer and events
  for stream order across processes: state that lives across calls, and none of it testable without a GPU.

Why a whole ProcessGroup in Python rather than `backend="cpu:gloo,cuda:<this>"`: torch's plugin backends must
be C++ `Backend`s (its Python class has no constructor), and a creator that returns a `ProcessGroup` replaces
the group as a whole (`_new_process_group_helper` in torch.distributed.distributed_c10d). So this group also
serves CPU tensors, handing them to gloo as they are; and since a Python subclass cannot carry a store, C++
(symmetric memory, functional collectives) finds a plain twin with one under the group's name (`register`).

The contract, as NCCL's for the caller:
- stream order: a CUDA tensor is copied out on the current stream with a blocking copy, so whatever the
  current stream queued before the call (the kernel that wrote it) has finished; work left on a side stream
  the caller never joined races, as it would with NCCL;
- async: what an operation receives lands in the caller's CUDA tensor when `work.wait()` returns (copied on
  the current stream of the waiting thread, as NCCL's wait orders the current stream after the transfer), or
  when `is_completed()` first reports the transfer done; never before, so an irecv that is never waited on
  leaves its tensor untouched (a bug under NCCL too: a race there);
- refused as NCCL refuses: non-contiguous tensors and one operation's tensors on different device types.

NCCL's forms, on CPU ranks too (issue 42): NCCL checks only element counts where gloo wants shapes, so plain gloo
refuses forms of the collectives NCCL takes, which PKB's references use (an all_gather_into_tensor into a stacked
(W, ...) output or of a 0-dim tensor, an all_gather into outputs of different sizes, an all_to_all of uneven
lists), and aborts the process on a stacked reduce_scatter_tensor input. Every candidate's group hands gloo these
in a form it takes (`_gloo_form`, `allgather`, `alltoall`); on CPU ranks it stages nothing (`stage` None),
refuses what NCCL refuses and gloo would take (a non-contiguous tensor) and costs a Python call per operation
(not measurable beside gloo's all_to_all_single of 16 KB at 2 and 4 CPU ranks). The trusted reference's CPU ranks
get this group too: a reference that NCCL would refuse fails on CPU ranks first (PKB 74's variant all-reduced a
transposed view, found on one H100 at world size 1: "Tensors must be contiguous").

The transport is the judge's, so the judge proves it before any candidate code runs: `check_transport`
runs every operation the references use on CUDA tensors when a rank set joins its group (ranks/server.py),
and a rank set that fails it never serves a candidate (its start fails: the judge's error, not a verdict).
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo

from pkb_env.wire.messages import HOST_STAGED

NAME = HOST_STAGED  # what `dist.get_backend()` answers on candidates' emulated and CPU ranks


def register(stage: str | None = "cuda") -> None:
    """Make `dist.init_process_group(NAME, ...)` and every `new_group` under it build a HostStagedGroup that
    stages tensors of device type `stage` ("cuda"; "cpu" stages host tensors too, for tests on CPU ranks; None
    stages nothing: candidates on CPU ranks, which get NCCL's forms only).

    torch registers every group it makes under its name for C++ to find (`_register_process_group`); for a
    HostStagedGroup, C++ is given its `native` twin instead (HostStagedGroup.__init__ says why)."""
    from torch.distributed import distributed_c10d as c10d

    dist.Backend.register_backend(NAME, partial(HostStagedGroup, stage=stage), devices=["cpu", "cuda"])
    original = c10d._register_process_group
    if getattr(original, "host_staged", False):
        return

    def register_process_group(name: str, group: Any) -> None:
        if isinstance(group, HostStagedGroup):
            group.native._set_group_name(name)
            group = group.native
        original(name, group)

    register_process_group.host_staged = True
    c10d._register_process_group = register_process_group


class StagedWork(dist.Work):
    """The gloo work of one staged operation; the operation's results land when it is waited on."""

    def __init__(self, inner: dist.Work, land: Callable[[], None]):
        super().__init__()
        self._inner = inner
        self._land: Callable[[], None] | None = land

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        self._inner.wait(timeout)
        self._finish()
        return True

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        if not self._inner.is_completed():
            return False
        self._finish()
        return True

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self) -> Any:
        return self._inner.exception()

    def source_rank(self) -> int:
        return self._inner._source_rank()

    _source_rank = source_rank  # the name dist.recv asks, for a receive from any source

    def _finish(self) -> None:
        land, self._land = self._land, None
        if land is not None:
            land()


class _Staging:
    """The host side of one operation: host copies of its staged inputs, host buffers for its staged outputs,
    and, when the operation completes, the results copied into the caller's tensors."""

    def __init__(self, stage: str | None):
        self.stage = stage
        self.device_type: str | None = None
        self.landings: list[tuple[torch.Tensor, torch.Tensor]] = []  # (caller's tensor, where gloo wrote it)

    def into(self, tensors: Any) -> Any:
        """Inputs: the host copies gloo reads."""
        return self._map(tensors, copy=True, land=False)

    def out(self, tensors: Any) -> Any:
        """Outputs: host buffers gloo writes, landed in the caller's tensors on completion."""
        return self._map(tensors, copy=False, land=True)

    def both(self, tensors: Any) -> Any:
        """In-place operands (all_reduce, a broadcast's receivers): copied out, and landed back."""
        return self._map(tensors, copy=True, land=True)

    def _map(self, tensors: Any, copy: bool, land: bool) -> Any:
        if self.stage is None:  # nothing staged (CPU ranks): gloo gets the caller's tensors, held to NCCL's rule
            _contiguous(tensors)
            return tensors
        if isinstance(tensors, (list, tuple)):
            return [self._map(t, copy, land) for t in tensors]
        return self._host(tensors, copy, land)

    def _host(self, tensor: torch.Tensor, copy: bool, land: bool) -> torch.Tensor:
        kind = tensor.device.type
        if self.device_type is None:
            self.device_type = kind
        elif kind != self.device_type:
            raise ValueError(f"one operation got tensors on {self.device_type} and on {kind}; put every tensor of "
                             f"a collective or send/recv on one device (NCCL refuses mixed devices too)")
        if kind != self.stage:
            host = tensor          # gloo moves it as it is
        elif not tensor.is_contiguous():
            raise ValueError(NOT_CONTIGUOUS)
        elif copy:
            # A blocking copy on the current stream: it starts after everything the stream queued before it.
            host = tensor.to("cpu", copy=True)
        else:
            host = torch.empty(tensor.shape, dtype=tensor.dtype)
        if land and host is not tensor:
            self.landings.append((tensor, host))
        return host

    def work(self, inner: dist.Work) -> dist.Work:
        """gloo's work as it is where nothing lands (host tensors handed over as they are), else the work that
        lands the results when waited on."""
        return StagedWork(inner, self._land) if self.landings else inner

    def _land(self) -> None:
        for target, host in self.landings:
            target.copy_(host)  # on the current stream; a blocking copy, so `host` may go when it returns
        self.landings = []


NOT_CONTIGUOUS = ("tensors passed to torch.distributed must be contiguous (NCCL refuses others too); call "
                  ".contiguous() first, or send a contiguous buffer")


def _contiguous(tensors: Any) -> None:
    """NCCL's rule on CPU ranks, where gloo would take a non-contiguous tensor that NCCL refuses ("Tensors must
    be contiguous"): code that passes here fails on GPUs (found in a trusted reference: PKB 74's variant)."""
    if isinstance(tensors, (list, tuple)):
        for t in tensors:
            _contiguous(t)
    elif isinstance(tensors, torch.Tensor) and not tensors.is_contiguous():
        raise ValueError(NOT_CONTIGUOUS)


class HostStagedGroup(dist.ProcessGroup):
    """A process group whose every operation runs on gloo, in NCCL's forms (`_gloo_form`, `allgather`,
    `alltoall`: those gloo refuses), with tensors of device type `stage` staged through host memory (the module
    docstring); `stage` None stages nothing (candidates on CPU ranks). Made by torch.distributed through
    `register`'s creator. Every operation is defined here: torch's own dispatch of one left out (to gloo, the
    group's CPU backend) hung on its second call (all_reduce, torch 2.13, one CPU rank)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta, stage: str | None = "cuda"):
        super().__init__(rank, size)  # (torch's constructor with a store cannot make a Python subclass)
        self.stage = stage
        self.world = size  # for the forms' checks, on every call: `size()` is a call into C++
        self.gloo = ProcessGroupGloo(store, rank, size, timeout)
        # gloo as the group's CPU backend too: the group's name lives in its backends. Never for CUDA: a CUDA
        # tensor handed to gloo's point-to-point is what aborted every rank.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self.gloo)
        # What C++ finds under this group's name (`register`): the same gloo, with a store. Symmetric memory's
        # rendezvous exchanges its handles through the store of the group it resolves by name, and a Python
        # subclass has none; functional collectives resolve by name too, and reach gloo as they did before.
        self.native = dist.ProcessGroup(PrefixStore("native", store), rank, size)
        for device in ("cpu", "cuda"):
            self.native._register_backend(torch.device(device), dist.ProcessGroup.BackendType.GLOO, self.gloo)
        self.native._set_default_backend(dist.ProcessGroup.BackendType.GLOO)

    def getBackendName(self) -> str:  # torch's virtual method, by its C++ name
        return NAME

    def _run(self, call: Callable[[_Staging], dist.Work]) -> dist.Work:
        """`call` makes gloo's work from the staging of one operation (its tensors mapped to host ones)."""
        s = _Staging(self.stage)
        return s.work(call(s))

    # -- point to point ---------------------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> dist.Work:
        return self._run(lambda s: self.gloo.send(s.into(tensors), dst, tag))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> dist.Work:
        return self._run(lambda s: self.gloo.recv(s.out(tensors), src, tag))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> dist.Work:
        return self._run(lambda s: self.gloo.recv_anysource(s.out(tensors), tag))

    # -- collectives (a broadcast's root and a reduce's non-roots only send) ------------------------------
    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:
        root = opts.rootRank == self.rank()
        return self._run(lambda s: self.gloo.broadcast(s.into(tensors) if root else s.both(tensors), opts))

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.allreduce(s.both(tensors), opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.allreduce_coalesced(s.both(tensors), opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:
        root = opts.rootRank == self.rank()
        return self._run(lambda s: self.gloo.reduce(s.both(tensors) if root else s.into(tensors), opts))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> dist.Work:
        """The list form; outputs of different sizes (NCCL's too: output i receives rank i's input, PKB's
        variable-length Ulysses gather) as one gather of blocks padded to the largest, each landing in its
        output. gloo takes only outputs shaped like the input."""
        if all(t.shape == inputs[0].shape for t in outputs[0]):
            return self._run(lambda s: self.gloo.allgather(s.out(outputs), s.into(inputs), opts))
        listed, mine = outputs[0], inputs[0]
        if listed[self.rank()].numel() != mine.numel():
            raise ValueError(f"all_gather: this rank's output (index {self.rank()}) holds "
                             f"{listed[self.rank()].numel()} elements and its input {mine.numel()}; output i must "
                             f"be shaped as rank i's input (NCCL refuses this too)")
        s = _Staging(self.stage)
        staged_in, staged_out = s.into(mine), s.out(listed)
        widest = max(t.numel() for t in staged_out)
        padded = staged_in.new_zeros(widest)
        padded[:staged_in.numel()] = staged_in.reshape(-1)
        gathered = staged_in.new_empty((self.world, widest))
        inner = self.gloo._allgather_base(gathered.view(-1), padded, opts)
        # Unpacked before the outputs land: each rank's block into its output (or into that output's host buffer).
        s.landings[:0] = [(t, row[:t.numel()].view(t.shape)) for t, row in zip(staged_out, gathered)]
        return s.work(inner)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.allgather_coalesced(s.out(outputs), s.into(inputs), opts))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        output, input = _gloo_form(output, input, self.world, "all_gather_into_tensor", big_is_output=True)
        return self._run(lambda s: self.gloo._allgather_base(s.out(output), s.into(input), opts))

    all_gather_single = _allgather_base  # the name torch 2.13's all_gather_into_tensor calls

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.gather(s.out(outputs), s.into(inputs), opts))

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.scatter(s.out(outputs), s.into(inputs), opts))

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.reduce_scatter(s.out(outputs), s.into(inputs), opts))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        input, output = _gloo_form(input, output, self.world, "reduce_scatter_tensor", big_is_output=False)
        return self._run(lambda s: self.gloo._reduce_scatter_base(s.out(output), s.into(input), opts))

    reduce_scatter_single = _reduce_scatter_base  # torch 2.13's name

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                      input_splits: list[int], opts: Any) -> dist.Work:
        return self._run(lambda s: self.gloo.alltoall_base(s.out(output), s.into(input), output_splits,
                                                           input_splits, opts))

    all_to_all_single = alltoall_base  # torch 2.13's name

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any) -> dist.Work:
        """The list form, as one all_to_all_single of the concatenated tensors (torch 2.11's gloo has no list
        form, 2.13's refuses uneven sizes; NCCL takes both): what this rank receives from rank s lands in
        outputs[s], uneven sizes included."""
        s = _Staging(self.stage)
        staged_in, staged_out = s.into(inputs), s.out(outputs)
        dtype = (staged_in or staged_out)[0].dtype
        flat_in = torch.cat([t.reshape(-1) for t in staged_in])
        sizes_out = [t.numel() for t in staged_out]
        flat_out = torch.empty(sum(sizes_out), dtype=dtype)
        inner = self.gloo.alltoall_base(flat_out, flat_in, sizes_out, [t.numel() for t in staged_in], opts)
        # Unpacked before the outputs land: each block into its output (or into that output's host buffer).
        s.landings[:0] = [(t, block.view(t.shape)) for t, block in zip(staged_out, flat_out.split(sizes_out))]
        return s.work(inner)

    def barrier(self, opts: Any = None) -> dist.Work:
        return self.gloo.barrier(opts if opts is not None else dist.BarrierOptions())


def _gloo_form(big: torch.Tensor, small: torch.Tensor, world: int, name: str,
               big_is_output: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(big, small) of a tensor collective (all_gather_into_tensor's output and input, reduce_scatter_tensor's
    input and output) in the form gloo takes, by NCCL's rule: only the element counts must agree (big holds
    `world` times small's), whatever the shapes. gloo takes only big = (world * small.shape[0], *small.shape[1:])
    and refuses a stacked (world, *small.shape) output, a 0-dim input and the like (PKB's all_gather, MoE
    preprocessing, gsplat); its reduce-scatter, given a stacked input, aborts the process. Anything else
    with the right counts is handed over flat: views of the caller's tensors, so results land in them."""
    if big.numel() != world * small.numel():
        raise ValueError(f"{name}: the {'output' if big_is_output else 'input'} holds {big.numel()} elements; it "
                         f"must hold the world size times the {'input' if big_is_output else 'output'}'s "
                         f"({world} x {small.numel()}), as NCCL requires")
    if small.dim() and big.shape == (world * small.shape[0], *small.shape[1:]):
        return big, small
    output = big if big_is_output else small
    if not output.is_contiguous():
        raise ValueError(f"{name}: the output must be contiguous (NCCL refuses others too); call .contiguous() "
                         f"first, or gather into a contiguous buffer")
    return big.reshape(-1), small.reshape(-1)   # the output's a view (contiguous); an input may be copied


def check_transport(device: torch.device, group: Any = None) -> None:
    """Every operation the references use, on `device` tensors over `group` (the default one): the judge's
    proof that its transport moves them before a candidate relies on it. RuntimeError naming the first that
    did not deliver what it should."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    peer = partial(dist.get_global_rank, group) if group is not None else (lambda r: r)
    nxt, prv = peer((rank + 1) % world), peer((rank - 1) % world)

    def ranks(*shape: int) -> torch.Tensor:  # value r + 1 on rank r
        return torch.full(shape, float(rank + 1), device=device)

    def expect(name: str, got: torch.Tensor, want: list[float]) -> None:
        want_t = torch.tensor(want, dtype=got.dtype).reshape(got.shape)
        if not torch.equal(got.cpu(), want_t):
            raise RuntimeError(f"the judge's {NAME} transport failed its check on {device}: {name} delivered "
                               f"{got.cpu().tolist()}, not {want_t.tolist()}")

    if world > 1:  # gloo has no send to oneself (NCCL has: docs/known_holes.md, "Emulated ranks")
        incoming = torch.zeros(2, device=device)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, ranks(2), nxt, group),
                                            dist.P2POp(dist.irecv, incoming, prv, group)]):
            work.wait()
        expect("isend/irecv", incoming, [float((rank - 1) % world + 1)] * 2)
    total = float(world * (world + 1) // 2)
    x = ranks(2)
    dist.all_reduce(x, group=group)
    expect("all_reduce", x, [total] * 2)
    x = ranks(1) if rank == 0 else torch.zeros(1, device=device)
    dist.broadcast(x, peer(0), group=group)
    expect("broadcast", x, [1.0])
    gathered = torch.zeros(world, device=device)
    dist.all_gather_into_tensor(gathered, ranks(1), group=group)
    expect("all_gather_into_tensor", gathered, [float(r + 1) for r in range(world)])
    scattered = torch.zeros(1, device=device)
    dist.reduce_scatter_tensor(scattered, ranks(world), group=group)
    expect("reduce_scatter_tensor", scattered, [total])
    exchanged = torch.zeros(world, device=device)
    dist.all_to_all_single(exchanged, ranks(world), group=group)
    expect("all_to_all_single", exchanged, [float(r + 1) for r in range(world)])
