"""One rank of tests/ranks/test_host_staged.py (and tests/gpu/test_host_staged_gpu.py): `python host_staged_ranks.py
RANK WORLD STORE DEVICE [unstaged]` joins a host-staged group (pkb_env/ranks/host_staged.py) staging DEVICE's
tensors ("cpu" stages host tensors too, so CPU ranks exercise the staging; `unstaged`: the group of candidates
on CPU ranks, which stages nothing), runs every scenario and prints one JSON line: {scenario: null when it
delivered, else what went wrong}.

The scenarios are the shapes PKB's problems are written in (rings, pairwise exchanges, halos) and every
collective the references call, each checked against a result computed locally from every rank's inputs.
"""
from __future__ import annotations

import json
import sys
import traceback

import torch
import torch.distributed as dist

from pkb_env.ranks import host_staged


def data(rank: int, n: int, device: str, salt: int = 0) -> torch.Tensor:
    """Rank `rank`'s distinct values (every rank can compute every other rank's)."""
    return torch.arange(n, dtype=torch.float32, device=device) * 0.5 + 100.0 * rank + salt


def scenarios(rank: int, world: int, device: str, staged: bool = True) -> dict:
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    everyone = [data(r, 6, device) for r in range(world)]
    mine = everyone[rank]

    def ring_all_gather():
        out = [torch.empty_like(mine) for _ in range(world)]
        out[rank].copy_(mine)
        for step in range(world - 1):  # pass the block received last step on
            send, recv = out[(rank - step) % world], out[(rank - step - 1) % world]
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]):
                work.wait()
        expect(torch.cat(out), torch.cat(everyone))

    def pairwise_all_to_all():
        chunks = [data(rank, 4, device, salt=10 * dst) for dst in range(world)]
        got = [torch.empty(4, device=device) for _ in range(world)]
        got[rank].copy_(chunks[rank])
        for shift in range(1, world):
            dst, src = (rank + shift) % world, (rank - shift) % world
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got[src], src),
                                            dist.P2POp(dist.isend, chunks[dst], dst)])
            for work in works:
                work.wait()
        expect(torch.cat(got), torch.cat([data(src, 4, device, salt=10 * rank) for src in range(world)]))

    def ring_reduce_scatter():
        full = [data(r, 4 * world, device) for r in range(world)]  # rank r's partial sums, world blocks of 4
        blocks = list(full[rank].split(4))
        acc = blocks[(rank - 1) % world].clone()
        for step in range(1, world):  # add this rank's share to the partial received, pass it on
            incoming = torch.empty_like(acc)
            send = dist.isend(acc, nxt)
            dist.recv(incoming, prv)
            send.wait()
            acc = incoming + blocks[(rank - step - 1) % world]
        expect(acc, sum(f.split(4)[rank] for f in full))

    def halo_send_recv():  # blocking send/recv in an order that cannot deadlock: even ranks send first
        left = torch.empty(2, device=device)
        if rank % 2 == 0:
            dist.send(mine[-2:].contiguous(), nxt)
            dist.recv(left, prv)
        else:
            dist.recv(left, prv)
            dist.send(mine[-2:].contiguous(), nxt)
        expect(left, everyone[prv][-2:])

    def lands_at_wait():
        got = torch.zeros(6, device=device)
        work = dist.irecv(got, prv)
        dist.send(mine, nxt)
        dist.barrier()  # the data has reached this rank's host buffer by now, or soon: not its tensor
        before = got.clone()
        work.wait()
        expect(before, torch.zeros(6, device=device))
        expect(got, everyone[prv])

    def send_buffer_reusable_after_isend():  # staged out at the call: the caller may refill it before wait
        buffer = mine.clone()
        got = torch.empty(6, device=device)
        works = [dist.isend(buffer, nxt), dist.irecv(got, prv)]
        buffer.fill_(-1.0)
        for work in works:
            work.wait()
        expect(got, everyone[prv])

    def recv_any_source():
        got = torch.empty(6, device=device)
        if rank == 0:
            for _ in range(world - 1):
                source = dist.recv(got)
                expect(got, everyone[source])
        else:
            dist.send(mine, 0)

    def collectives():
        total = sum(everyone)
        x = mine.clone()
        dist.all_reduce(x)
        expect(x, total)
        x = mine.clone()
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        expect(x, total / world)
        x = mine.clone()
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        expect(x, everyone[-1])
        x = mine.clone()
        dist.reduce(x, 0)
        if staged or rank == 0:  # lands at the root only (unstaged, gloo uses a non-root's buffer as scratch)
            expect(x, total if rank == 0 else mine)
        x = mine.clone()
        dist.broadcast(x, world - 1)
        expect(x, everyone[-1])
        out = torch.empty(6 * world, device=device)
        dist.all_gather_into_tensor(out, mine)
        expect(out, torch.cat(everyone))
        listed = [torch.empty(6, device=device) for _ in range(world)]
        dist.all_gather(listed, mine)
        expect(torch.cat(listed), torch.cat(everyone))
        full = [data(r, 2 * world, device) for r in range(world)]
        part = torch.empty(2, device=device)
        dist.reduce_scatter_tensor(part, full[rank])
        expect(part, sum(f.split(2)[rank] for f in full))
        dist.reduce_scatter_tensor(part, full[rank], op=dist.ReduceOp.AVG)
        expect(part, sum(f.split(2)[rank] for f in full) / world)
        part_list = torch.empty(2, device=device)
        dist.reduce_scatter(part_list, list(full[rank].split(2)))
        expect(part_list, sum(f.split(2)[rank] for f in full))
        swapped = torch.empty(2 * world, device=device)
        dist.all_to_all_single(swapped, full[rank])
        expect(swapped, torch.cat([f.split(2)[rank] for f in full]))
        sizes = [r + 1 for r in range(world)]  # uneven: rank r sends (dst + 1) elements to dst
        uneven_in = torch.cat([data(rank, dst + 1, device, salt=dst) for dst in range(world)])
        uneven_out = torch.empty(world * (rank + 1), device=device)
        dist.all_to_all_single(uneven_out, uneven_in, [rank + 1] * world, sizes)
        expect(uneven_out, torch.cat([data(src, rank + 1, device, salt=rank) for src in range(world)]))
        outs = [torch.empty(2, device=device) for _ in range(world)]
        dist.all_to_all(outs, list(full[rank].split(2)))
        expect(torch.cat(outs), torch.cat([f.split(2)[rank] for f in full]))
        gathered = [torch.empty(6, device=device) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, gathered, dst=0)
        if rank == 0:
            expect(torch.cat(gathered), torch.cat(everyone))
        got = torch.empty(6, device=device)
        dist.scatter(got, everyone if rank == 0 else None, src=0)
        expect(got, mine)
        dist.barrier()

    def nccl_forms():  # forms NCCL takes and plain gloo refuses (or, for reduce_scatter_tensor, aborts on)
        stacked = torch.empty(world, 6, device=device)           # PKB's all_gather: a (W, ...) output
        dist.all_gather_into_tensor(stacked, mine)
        expect(stacked, torch.stack(everyone))
        scalars = torch.empty(world, device=device)              # a 0-dim input (gsplat's)
        dist.all_gather_into_tensor(scalars, mine.sum())
        expect(scalars, torch.stack([e.sum() for e in everyone]))
        flat = torch.empty(world * 6, device=device)             # a 2-D input into a flat output
        dist.all_gather_into_tensor(flat, mine.view(2, 3))
        expect(flat, torch.cat(everyone))
        uneven = [torch.empty(r + 1, 2, device=device) for r in range(world)]   # Ulysses' variable gather
        dist.all_gather(uneven, data(rank, 2 * (rank + 1), device).view(rank + 1, 2))
        expect(torch.cat([t.view(-1) for t in uneven]), torch.cat([data(r, 2 * (r + 1), device) for r in range(world)]))
        full = [data(r, 2 * world, device) for r in range(world)]
        part = torch.empty(2, device=device)                     # a stacked (W, ...) input
        dist.reduce_scatter_tensor(part, full[rank].view(world, 2))
        expect(part, sum(f.split(2)[rank] for f in full))
        outs = [torch.empty(rank + 1, device=device) for _ in range(world)]    # uneven list all_to_all (MoE)
        dist.all_to_all(outs, [data(rank, dst + 1, device, salt=dst) for dst in range(world)])
        expect(torch.cat(outs), torch.cat([data(src, rank + 1, device, salt=rank) for src in range(world)]))
        for call in (lambda: dist.all_gather_into_tensor(torch.empty(world + 1, device=device), mine[:1]),
                     lambda: dist.reduce_scatter_tensor(part, torch.empty(world * 2 + 1, device=device))):
            try:
                call()
            except ValueError as exc:   # NCCL's refusal, not gloo's abort of the process
                if "world size" not in str(exc):
                    raise
            else:
                raise AssertionError("a collective with mismatched sizes ran")

    def bfloat16_ring():
        x = data(rank, 6, device).to(torch.bfloat16)
        got = torch.empty_like(x)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, got, prv)]):
            work.wait()
        expect(got, data(prv, 6, device).to(torch.bfloat16))

    def subgroup_ring():  # pairs (0, 1), (2, 3): a mesh dimension's groups, as build_groups makes them
        pairs = [list(range(r, min(r + 2, world))) for r in range(0, world, 2)]
        groups = [dist.new_group(p) for p in pairs]
        mine_pair = next(p for p in pairs if rank in p)
        group = groups[pairs.index(mine_pair)]
        if len(mine_pair) == 2:
            other = mine_pair[1 - mine_pair.index(rank)]
            got = torch.empty(6, device=device)
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, other, group),
                                                dist.P2POp(dist.irecv, got, other, group)]):
                work.wait()
            expect(got, everyone[other])
        host_staged.check_transport(torch.device(device), group)

    def refuses_non_contiguous():
        try:
            dist.send(torch.zeros(4, 4, device=device).t(), nxt)
        except ValueError as exc:
            if "contiguous" not in str(exc):
                raise
        else:
            raise AssertionError("a non-contiguous tensor was sent")

    def judge_check():
        host_staged.check_transport(torch.device(device))

    checks = [judge_check, ring_all_gather, pairwise_all_to_all, ring_reduce_scatter, halo_send_recv, lands_at_wait,
              send_buffer_reusable_after_isend, recv_any_source, collectives, nccl_forms, bfloat16_ring, subgroup_ring,
              refuses_non_contiguous]
    results = {}
    for check in checks:
        try:
            check()
            results[check.__name__] = None
        except Exception:  # noqa: BLE001 (reported to the test, which fails on it)
            results[check.__name__] = traceback.format_exc(limit=4)[-1500:]
        dist.barrier()  # the next scenario starts together, whatever this one did
    return results


def expect(got: torch.Tensor, want: torch.Tensor) -> None:
    if not torch.equal(got.cpu(), want.cpu()):
        raise AssertionError(f"got {got.cpu().tolist()}, expected {want.cpu().tolist()}")


def main() -> None:
    rank, world, store, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    staged = sys.argv[5:] != ["unstaged"]   # unstaged: the group of candidates on CPU ranks (NCCL's forms only)
    host_staged.register(stage=torch.device(device).type if staged else None)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(host_staged.NAME, store=dist.FileStore(store, world), rank=rank, world_size=world)
    results = scenarios(rank, world, device, staged)
    dist.destroy_process_group()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
