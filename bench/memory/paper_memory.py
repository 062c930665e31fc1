"""Peak memory of one training step per GPU at the papers' settings, against a 32 GB V100.

    python bench/memory/paper_memory.py --device cpu     # estimate: fake tensors, seconds, no memory used
    python bench/memory/paper_memory.py --device cuda    # measure on the GPU (allocator statistics)

Per GPU, as the papers ran them (the configured batch is global and DDP splits it):

* ZINC: 256 graphs over 4 V100s = 64 graphs, every one of ZINC's largest size (38 atoms),
  molecule-shaped; the model of ``configs/zinc_subset.yaml``;
* PCQM4Mv2: 512 over 8 = 64 graphs of 51 atoms (the largest molecule of PCQM4Mv2), the model of
  ``configs/pcqm4mv2.yaml``;
* MAG240M: 1024 target papers over 32 = 32 subgraphs sampled at fanouts [25, 15] by the real
  sampler and datamodule from a synthetic release in the real layout (dense: subgraphs of up to
  ~385 nodes); the largest of a few batches, padded further to the fanouts' bound
  1 + 25 + 25 * 15 = 401 nodes (the real graph's hubs reach it); the model of ``configs/mag240m.yaml``.

Every batch is padded to its largest graph, so "every graph of the largest size" is the worst
case a step can meet. A step is the task's own training step, clipping (the config's
``gradient_clip_val``) and its AdamW update (the second step, with the optimiser state present;
``bench/memory/step_memory.py``) in ``16-mixed`` (the V100 setting; ``--precision`` for others).
The verdict: on a GPU, ``max_memory_reserved`` plus the CUDA context must stay under the V100's
usable memory; from a CPU estimate (tensors only), the peak plus 15 % allocator overhead plus the
context must.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import random_molecule_record
from bench.memory.step_memory import GIB, Precision, StepMemory, estimate_step_memory, measure_step_memory
from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.tasks import GraphormerTask

#: What a 32 GB V100 offers to PyTorch (nvidia-smi: 32,510 MiB) and what the CUDA context takes.
V100_USABLE_GIB = 32510 / 1024
CUDA_CONTEXT_GIB = 0.5
#: Allocator rounding and fragmentation assumed on top of a tensors-only estimate.
ALLOCATOR_OVERHEAD = 0.15


@dataclass
class Setting:
    """One paper setting: its config, the batch per GPU and how it was split."""

    name: str
    config: str
    global_batch: int
    gpus: int

    @property
    def per_gpu(self) -> int:
        return self.global_batch // self.gpus


SETTINGS = {
    "zinc": Setting("ZINC", "zinc_subset", 256, 4),
    "pcqm4mv2": Setting("PCQM4Mv2", "pcqm4mv2", 512, 8),
    "mag240m": Setting("MAG240M", "mag240m", 1024, 32),
}
#: Largest graphs of the molecule datasets (atoms).
LARGEST_MOLECULE = {"zinc": 38, "pcqm4mv2": 51}


@dataclass
class Result:
    """One setting's figures (GiB) and verdict."""

    setting: str
    graphs_per_gpu: int
    padded_nodes: int
    largest_graph: int
    parameters: int
    device: str
    precision: str
    peak_gib: float
    persistent_gib: float
    reserved_gib: float | None
    needed_gib: float
    fits_v100: bool
    seconds: float


def needed_gib(memory: StepMemory) -> float:
    """What the step needs of a V100: measured reserved memory, or the estimate plus overhead, plus the context."""
    tensors = memory.reserved if memory.reserved is not None else memory.peak * (1 + ALLOCATOR_OVERHEAD)
    return tensors / GIB + CUDA_CONTEXT_GIB


def build(config: str, *overrides: str) -> tuple[GraphormerTask, GraphormerCLI]:
    """The task of ``configs/<config>.yaml`` as train.py builds it (the data's spec linked in)."""
    with tempfile.TemporaryDirectory() as runs:
        cli = GraphormerCLI(
            ["--config", config, "--run_root", runs, "--logger", "none", "--trainer.accelerator", "cpu", *overrides]
        )
    return cli.model, cli


def molecule_batch(task: GraphormerTask, graphs: int, atoms: int, seed: int = 0) -> GraphBatch:
    """``graphs`` molecule-shaped graphs of ``atoms`` atoms with random features in the model's
    vocabularies and one regression target each."""
    rng = np.random.default_rng(seed)
    config = task.model.config
    records = [
        random_molecule_record(rng, atoms, index, config.node_vocab, config.edge_vocab) for index in range(graphs)
    ]
    return collate_graphs(records)


def synthetic_mag_root(directory: Path, papers: int = 100_000) -> Path:
    """A synthetic MAG240M release (real layout, 153 classes, 5 papers per author, 40 citations and
    10 authors per paper) dense enough for subgraphs near the 401-node bound; built once."""
    from graphormer_urpe.data.mag240m.derived import prepare_derived
    from graphormer_urpe.data.mag240m.release import MAG240MRaw
    from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m

    root = directory / f"mag240m_{papers}"
    if not (root / "mag240m_kddcup2021" / "graphormer").exists():
        print(f"writing a synthetic MAG240M release ({papers:,} papers) under {root}", flush=True)
        write_synthetic_mag240m(
            root,
            SyntheticMAG(
                num_papers=papers,
                num_authors=papers // 5,
                num_classes=153,
                labelled_fraction=0.5,
                citations_per_paper=40,
                authors_per_paper=10,
                seed=0,
            ),
        )
        raw = MAG240MRaw(root)
        raw.check()
        prepare_derived(raw, raw.directory / "graphormer")
    return root


def pad_nodes(batch: GraphBatch, nodes: int) -> GraphBatch:
    """``batch`` padded to ``nodes`` nodes per graph (the padding values of the batch contract):
    the dense model then pays for them exactly as for real nodes."""
    extra = nodes - batch.spd.shape[1]
    if extra <= 0:
        return batch
    node_rows = {name: F.pad(getattr(batch, name), (0, extra)) for name in ("node_mask", "in_degree", "out_degree")}
    return dataclasses.replace(
        batch,
        **node_rows,
        x=F.pad(batch.x, (0, 0, 0, extra)),
        x_continuous=F.pad(batch.x_continuous, (0, 0, 0, extra)),
        spd=F.pad(batch.spd, (0, extra, 0, extra), value=UNREACHABLE_SPD),
        first_edge=F.pad(batch.first_edge, (0, extra, 0, extra), value=NO_EDGE),
    )


def mag_batch(cli: GraphormerCLI, batches: int) -> tuple[GraphBatch, int]:
    """The largest of ``batches`` training batches of the real MAG240M datamodule, padded as on the
    device, then to the fanouts' bound (1 + 25 + 25 * 15 = 401 nodes: the worst case); unknown
    labels replaced by class 0 (the loss then covers every target). Also returns the largest
    sampled subgraph's node count."""
    module = cli.datamodule
    module.setup("fit")
    loader = iter(module.train_dataloader())
    largest: GraphBatch | None = None
    for _ in range(batches):
        compact = next(loader)
        padded = module.on_after_batch_transfer(compact, 0)
        if largest is None or padded.spd.shape[1] > largest.spd.shape[1]:
            largest = padded
    largest.y = torch.nan_to_num(largest.y, nan=0.0)
    bound = sum(math.prod(module.fanouts[:hop]) for hop in range(len(module.fanouts) + 1))
    return pad_nodes(largest, bound), int(largest.spd.shape[1])


def run_setting(
    key: str,
    device: torch.device,
    precision: Precision,
    work: Path,
    mag_batches: int = 6,
    mag_papers: int = 100_000,
    log: Callable[[str], None] = print,
) -> Result:
    """Build the setting's task and worst-case batch, then measure (CUDA) or estimate (CPU) a step."""
    setting = SETTINGS[key]
    started = time.perf_counter()
    if key == "mag240m":
        root = synthetic_mag_root(work, mag_papers)
        task, cli = build(
            setting.config,
            "--data.root",
            str(root),
            "--data.batch_size",
            str(setting.per_gpu),
            "--data.num_workers",
            "0",
        )
        batch, largest = mag_batch(cli, mag_batches)
    else:
        task, cli = build(setting.config)
        batch = molecule_batch(task, setting.per_gpu, LARGEST_MOLECULE[key])
        largest = int(batch.spd.shape[1])
    padded = int(batch.spd.shape[1])
    parameters = sum(p.numel() for p in task.parameters())
    log(
        f"{setting.name}: {setting.global_batch} graphs over {setting.gpus} GPUs = {setting.per_gpu} per GPU, "
        f"padded to {padded} nodes (largest graph sampled: {largest}); {parameters:,} parameters; "
        f"{precision} on {device}"
    )
    clip = cli.trainer.gradient_clip_val
    if device.type == "cuda":
        memory = measure_step_memory(task.to(device), batch.to(device), precision, clip)
    else:
        memory = estimate_step_memory(task, batch, precision, clip)
    needed = needed_gib(memory)
    return Result(
        setting=setting.name,
        graphs_per_gpu=setting.per_gpu,
        padded_nodes=padded,
        largest_graph=largest,
        parameters=parameters,
        device=str(device),
        precision=precision,
        peak_gib=memory.peak / GIB,
        persistent_gib=memory.persistent / GIB,
        reserved_gib=None if memory.reserved is None else memory.reserved / GIB,
        needed_gib=needed,
        fits_v100=needed <= V100_USABLE_GIB,
        seconds=time.perf_counter() - started,
    )


def markdown(results: list[Result]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| setting | graphs/GPU | nodes (padded to) | peak tensors (GiB) | reserved (GiB) | "
        "needs of a V100 (GiB) | fits 32 GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        reserved = "-" if r.reserved_gib is None else f"{r.reserved_gib:.2f}"
        nodes = f"{r.padded_nodes}" if r.largest_graph == r.padded_nodes else f"{r.largest_graph} ({r.padded_nodes})"
        lines.append(
            f"| {r.setting} | {r.graphs_per_gpu} | {nodes} | {r.peak_gib:.2f} | "
            f"{reserved} | {r.needed_gib:.2f} | {'yes' if r.fits_v100 else 'NO'} |"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def work_directory(path: Path | None) -> Iterator[Path]:
    """``path`` (kept), or a temporary directory."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory() as temporary:
            yield Path(temporary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="16-mixed", choices=["32", "16-mixed", "bf16-mixed"])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--mag-batches", type=int, default=6, help="MAG240M batches sampled; the largest is used")
    parser.add_argument("--mag-papers", type=int, default=100_000, help="papers of the synthetic MAG240M")
    parser.add_argument("--work", type=Path, default=None, help="keep the synthetic MAG240M release here")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    device = torch.device(args.device)
    results = []
    with work_directory(args.work) as work:
        for key in args.settings:
            results.append(run_setting(key, device, args.precision, work, args.mag_batches, args.mag_papers))
            print(markdown(results[-1:]).splitlines()[-1], flush=True)
    kind = (
        "measured on " + torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "estimated on the CPU (fake tensors; tensors only, +15 % allocator overhead and 0.5 GiB context assumed)"
    )
    print(f"\npeak memory of one training step per GPU, {args.precision}, {kind}:\n{markdown(results)}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
