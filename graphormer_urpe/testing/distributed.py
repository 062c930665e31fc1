"""Functions run on several processes joined by a gloo process group, as DDP's processes are, on the CPU."""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _init_and_run(rank: int, world: int, port: int, fn: Callable[..., None], args: tuple) -> None:
    torch.set_num_threads(1)  # the parent's OpenMP thread pool does not survive fork()
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def run_on_processes(fn: Callable[..., None], world: int, *args: object, timeout: float = 120.0) -> None:
    """Run ``fn(rank, world, *args)`` on ``world`` forked processes joined by gloo; raises if one raises, or
    ``TimeoutError`` (killing them) if they do not finish within ``timeout`` seconds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.start_processes(
        _init_and_run, args=(world, port, fn, args), nprocs=world, join=False, start_method="fork"
    )
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{world} processes did not finish within {timeout} s (hang)")
