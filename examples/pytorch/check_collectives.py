"""torch.distributed's "nccl" backend through whichever libnccl.so.2 the process loads.

One process per GPU runs all_reduce, all_gather, reduce_scatter, broadcast, a send/recv
pair and all_to_all_single (even splits: ncclAlltoAll; uneven: PyTorch's group of ncclSend
and ncclRecv with every rank, itself included) on CUDA tensors and checks every element
against values computed here, at two sizes: 1 Mi floats (oxccl's ring; blocks over the
LL limit) and 777 floats (oxccl's one-hop LL path). WORLD sets the number of processes
(default: one per GPU); with more processes than GPUs they share them (oxccl; NCCL refuses
two ranks on one GPU of one host). With POSE_HOSTS=1 each process is a host of its own to
the library (NCCL_HOSTID), so that NCCL too takes two on one GPU and moves every byte
between them over its network (a net plugin's, with NCCL_NET_PLUGIN).
Run it with oxccl's library preloaded to exercise oxccl, and without to exercise NCCL:

    LD_PRELOAD=path/to/oxccl/libnccl.so.2 python3 examples/pytorch/check_collectives.py
    python3 examples/pytorch/check_collectives.py

Prints one "ok" line per collective and rank; exits non-zero on any mismatch.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, world: int, port: int) -> None:
    if os.environ.get("POSE_HOSTS") == "1":
        os.environ["NCCL_HOSTID"] = f"pytorch-host{rank}"
    gpu = rank % torch.cuda.device_count()
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=dev)
    for n in (1 << 20, 777):
        check(rank, world, dev, n)
    torch.cuda.synchronize()
    dist.destroy_process_group()


def check(rank: int, world: int, dev: torch.device, n: int) -> None:

    x = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    assert torch.all(x == sum(range(1, world + 1))).item(), "all_reduce"
    print(f"rank {rank}: {n} floats: ok all_reduce", flush=True)

    out = torch.empty(world * n, device=dev)
    dist.all_gather_into_tensor(out, torch.full((n,), float(rank), device=dev))
    want = torch.arange(world, device=dev, dtype=torch.float32).repeat_interleave(n)
    assert torch.equal(out, want), "all_gather"
    print(f"rank {rank}: {n} floats: ok all_gather", flush=True)

    inp = torch.arange(world * n, device=dev, dtype=torch.float32) + rank
    got = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(got, inp)
    base = torch.arange(rank * n, (rank + 1) * n, device=dev, dtype=torch.float32)
    assert torch.equal(got, base * world + sum(range(world))), "reduce_scatter"
    print(f"rank {rank}: {n} floats: ok reduce_scatter", flush=True)

    b = torch.full((n,), 7.0 if rank == 0 else -1.0, device=dev)
    dist.broadcast(b, src=0)
    assert torch.all(b == 7.0).item(), "broadcast"
    print(f"rank {rank}: {n} floats: ok broadcast", flush=True)

    if rank == 0:
        dist.send(torch.arange(n, device=dev, dtype=torch.float32), dst=1)
    elif rank == 1:
        r = torch.empty(n, device=dev)
        dist.recv(r, src=0)
        assert torch.equal(r, torch.arange(n, device=dev, dtype=torch.float32)), "send/recv"
    print(f"rank {rank}: {n} floats: ok send/recv", flush=True)

    # Element i of the block rank r sends to rank p: 1000 r + p + i / 4096 (exact in float).
    def block(r: int, p: int, size: int) -> torch.Tensor:
        return 1000.0 * r + p + torch.arange(size, device=dev, dtype=torch.float32) / 4096

    even = torch.cat([block(rank, p, n) for p in range(world)])
    got = torch.empty(world * n, device=dev)
    dist.all_to_all_single(got, even)
    assert torch.equal(got, torch.cat([block(p, rank, n) for p in range(world)])), "all_to_all_single"
    print(f"rank {rank}: {n} floats: ok all_to_all_single", flush=True)

    def split(r: int, p: int) -> int:  # the elements r sends to p
        return n + 3 * r + 5 * p

    sent = torch.cat([block(rank, p, split(rank, p)) for p in range(world)])
    got = torch.empty(sum(split(p, rank) for p in range(world)), device=dev)
    dist.all_to_all_single(got, sent, output_split_sizes=[split(p, rank) for p in range(world)], input_split_sizes=[split(rank, p) for p in range(world)])
    assert torch.equal(got, torch.cat([block(p, rank, split(p, rank)) for p in range(world)])), "all_to_all_single, uneven splits"
    print(f"rank {rank}: {n} floats: ok all_to_all_single uneven", flush=True)


if __name__ == "__main__":
    world = int(os.environ.get("WORLD", torch.cuda.device_count()))
    if world < 2:
        sys.exit("needs at least 2 processes (WORLD, default one per GPU)")
    mp.spawn(run, args=(world, int(os.environ.get("PORT", "29517"))), nprocs=world, join=True)
