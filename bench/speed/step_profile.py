"""A ``torch.profiler`` summary of one warm training step: where the step's time goes.

    python bench/speed/step_profile.py --setting zinc --mode eager                       # CPU
    python bench/speed/step_profile.py --setting zinc --mode cuda_graphs --device cuda --precision bf16-mixed

The step is ``bench/speed/train_throughput.py``'s (the task's forward and loss, backward, clipping, fused AdamW) on one
global batch of ``--batch-size`` molecules of the setting's sizes (the epoch's median-sized size-aware batch; padded
to ``--pad-nodes-to`` for compiled modes), after ``--warm`` warm-up steps on it. Printed: the step's wall time and
the host's CPU time in it; on CUDA the device time of its kernels and their count; the top ops (CPU: by self CPU
time) or kernels (CUDA: by device time); the ATen ops dispatched by the forward, the backward and the optimiser (not
those inside another op; on a GPU each launches at least one kernel); and the reads of a value from the device
(``item()`` and the like, each a point where the host waits for the device: on CUDA every synchronisation the sync
debug mode reports, on the CPU every ``item()`` the step's code calls outside an op).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import random_molecule_record
from bench.speed.train_throughput import MODES, PRECISIONS, SETTINGS, Step, edges_per_node, epoch_batches
from graphormer_urpe.data.batch import BatchShape
from graphormer_urpe.model.attention import ATTENTION_KERNELS


def host_waits(step: Step, batch: object, device: torch.device) -> int:
    """Synchronisations of one step: CUDA's sync debug mode counts them (each a warning)."""
    if device.type != "cuda":
        return -1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize(device)
    return sum("synchroniz" in str(w.message) for w in caught)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", default="zinc", choices=list(SETTINGS))
    parser.add_argument("--mode", default="eager", choices=list(MODES))
    parser.add_argument("--attention", default="urpe", choices=["urpe", "rpe"])
    parser.add_argument("--kernel", default="eager", choices=ATTENTION_KERNELS, help="attention kernel (flex: CUDA)")
    parser.add_argument("--precision", default="32", choices=list(PRECISIONS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--pad-nodes-to", type=int, default=8)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="ops or kernels listed")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    setting = SETTINGS[args.setting]
    rng = np.random.default_rng(0)
    records = [
        random_molecule_record(rng, setting.atoms(rng), index, setting.node_vocab, setting.edge_vocab)
        for index in range(args.batch_size * 8)
    ]
    shape = None if args.mode == "eager" else BatchShape(args.pad_nodes_to, args.batch_size, edges_per_node(records))
    batches = sorted(
        epoch_batches(records, args.batch_size, "bucketed", setting.bucket_window, shape, device),
        key=lambda b: b.x.shape[1],
    )
    batch = batches[len(batches) // 2]
    step = Step(setting, args.attention, args.mode, device, args.precision, args.kernel)
    for _ in range(args.warm):
        step(batch)
    waits = host_waits(step, batch, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    with profile(activities=activities) as profiler:
        step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    events = profiler.key_averages()
    # ATen ops not called by another ATen op: the forward's, the backward's (under autograd's nodes), the optimiser's
    dispatched = [
        e
        for e in profiler.events()
        if e.name.startswith("aten::") and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
    ]
    print(
        f"{args.setting} ({setting.config}), {args.mode}, {args.attention}, precision {args.precision}, {device}; "
        f"batch of {batch.num_graphs} graphs padded to {batch.x.shape[1]} nodes and {batch.edge_attr.shape[0]} edges"
    )
    print(f"step (profiled): {1000 * wall:.1f} ms wall, {1000 * cpu:.1f} ms of host CPU time")
    print(f"ATen ops dispatched (not inside another op): {len(dispatched)}")
    if device.type == "cuda":
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        device_ms = sum(e.self_device_time_total for e in kernels) / 1000
        launches = sum(e.count for e in kernels)
        print(
            f"device: {device_ms:.1f} ms in {launches} kernels ({device_ms / (1000 * wall):.0%} of the step's wall "
            f"time busy); synchronisations (sync debug mode): {waits}"
        )
        print(events.table(sort_by="self_device_time_total", row_limit=args.top))
    else:
        # item() called by the step's code, not inside an op (the CPU's fused AdamW reads its step counters so)
        reads = sum(
            1
            for e in profiler.events()
            if e.name == "aten::item" and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
        )
        print(f"reads of a value by the step's code (item() outside any op): {reads}")
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
