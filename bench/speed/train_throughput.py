"""The training step at steady state: eager against compiled against compiled with CUDA graphs, URPE against RPE,
size-aware against uniform batches, the eager attention kernel against FlexAttention, for the ZINC and the PCQM4Mv2
configs and the small-data recipe.

    python bench/speed/train_throughput.py                                  # CPU, one thread: per-core figures
    python bench/speed/train_throughput.py --device cuda --precision bf16-mixed --modes eager compiled cuda_graphs
    python bench/speed/train_throughput.py --device cuda --precision bf16-mixed --settings pcqm --kernels eager flex
    python bench/speed/train_throughput.py --settings chembl --batch-size 32 --epoch-batches 16 --modes eager \
        --attention urpe --batchings today bucketed             # the recipe on MoleculeACE's CHEMBL1871_Ki sizes

Settings (``--settings``), each a config's model on molecules of its dataset's sizes (molecule-shaped random graphs,
:func:`bench.common.random_molecule_record`, with the featurisation's vocabularies):

* ``zinc``: ``configs/zinc_subset.yaml`` (12 layers, 80 wide, 8 heads), 9-38 atoms (ZINC's statistics);
* ``pcqm``: ``configs/pcqm4mv2.yaml`` (6 layers, 512 wide, 32 heads), PCQM4Mv2-like sizes: 99.5 % normal(14, 3.2)
  clipped to 1-30, 0.5 % uniform in 31-51 (an assumed histogram with PCQM4Mv2's range and mean);
* ``chembl``: the small-data recipe's network, the shipped checkpoint's architecture that ``small_molecules.yaml``
  fine-tunes (``configs/pretrain_moses.yaml``: 4 layers, 128 wide, 8 heads; no dropout there, 0.1 in the recipe; the
  descriptor block at the readout, one linear layer, left out), on sizes drawn from the heavy atoms of MoleculeACE's
  CHEMBL1871_Ki training molecules (the ``MoleculeACE==3.0.0`` wheel: 473 molecules of 14-186 atoms, mean 33), its
  size-aware batches cut from windows of 4 batches (``small_molecules.yaml``'s ``bucket_window``).

Size-aware batches (``bucketed``) use the setting's window: the dataset's config's ``bucket_window`` (ZINC, the
recipe), else 100.

A step is the task's own: ``step_losses`` (eager, or compiled by ``--model.compile``'s code) under the precision's
autocast, backward (loss-scaled in ``16-mixed``), the config's gradient clipping and the task's AdamW (fused where the
device allows), its attention computed by ``--kernels``' kernel (:mod:`graphormer_urpe.model.flex`; ``flex`` on CUDA
only). The epoch's ``--epoch-batches`` global batches come from the project's sampler, uniform (``today``)
or size-aware (``bucketed``, ``bucket_window`` 100); compiled modes pad every batch to a multiple of
``--pad-nodes-to`` nodes, its full graph count and an edge bound (:class:`~graphormer_urpe.data.batch.BatchShape`),
eager keeps each batch as collated. Every variant first runs each distinct batch shape of the epoch ``--warm``
times (compilation, CUDA graph capture, allocator and autotuning caches), then ``--rounds`` whole epochs; variants
alternate within every round, so all see the same machine. Printed per variant: graphs per second of the median
round (slowest and fastest in brackets), warm-up seconds, and on CUDA the peak memory; then the ratios. On the CPU the
time is the process's CPU time (work done, robust to a shared machine), on CUDA the wall time between
synchronisations at each round's ends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import exit_code, random_molecule_record
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.data.batch import BatchShape, GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.loaders import GlobalBatchSampler
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.attention import ATTENTION_KERNELS, use_attention_kernel
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks import GraphRegression, OptimConfig
from graphormer_urpe.tasks.optimiser import adamw
from graphormer_urpe.testing.zinc_raw import zinc_like_atoms

PRECISIONS = {"32": None, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
MODES = {"eager": False, "compiled": True, "cuda_graphs": "cuda_graphs"}


def pcqm_like_atoms(rng: np.random.Generator) -> int:
    """Heavy atoms of a PCQM4Mv2-sized molecule (module docstring)."""
    if rng.random() < 0.005:
        return int(rng.integers(31, 52))
    return int(np.clip(round(rng.normal(14.0, 3.2)), 1, 30))


@dataclass(frozen=True)
class Setting:
    """A config's model on molecules of its dataset's sizes, with the vocabularies of its featurisation."""

    config: str
    atoms: Callable[[np.random.Generator], int]
    node_vocab: tuple[int, ...]
    edge_vocab: tuple[int, ...]
    bucket_window: int  # of the size-aware batches


@functools.cache
def chembl1871_sizes() -> np.ndarray:
    """Heavy atoms of each training molecule of MoleculeACE's CHEMBL1871_Ki (the benchmark's rows, its validation
    rows left out), read from the MoleculeACE wheel."""
    from rdkit import Chem

    from bench.small_data.moleculeace import read_set

    table = read_set("CHEMBL1871_Ki")
    return np.array(
        [Chem.MolFromSmiles(smiles).GetNumHeavyAtoms() for smiles in table.query("split == 'train'").smiles]
    )


def chembl1871_like_atoms(rng: np.random.Generator) -> int:
    """Heavy atoms of a molecule drawn (with replacement) from CHEMBL1871_Ki's training molecules."""
    return int(rng.choice(chembl1871_sizes()))


SETTINGS = {
    "zinc": Setting("zinc_subset", zinc_like_atoms, (28,), (4,), 100),
    "pcqm": Setting("pcqm4mv2", pcqm_like_atoms, tuple(ATOM_VOCAB), tuple(BOND_VOCAB), 100),
    "chembl": Setting("pretrain_moses", chembl1871_like_atoms, tuple(ATOM_VOCAB), tuple(BOND_VOCAB), 4),
}


class Step:
    """One training step of the task ``setting`` configures, as ``mode`` runs it.

    Args:
        setting: the config and the data's vocabularies.
        attention: ``urpe`` or ``rpe``.
        mode: a key of :data:`MODES`.
        device: where it runs.
        precision: a key of :data:`PRECISIONS`.
        kernel: the attention kernel, ``eager`` or ``flex``.
    """

    def __init__(
        self, setting: Setting, attention: str, mode: str, device: torch.device, precision: str, kernel: str
    ) -> None:
        config = yaml.safe_load((CONFIG_DIR / f"{setting.config}.yaml").read_text())
        task_args = config["model"]["init_args"]
        encoder = GraphormerConfig(
            **{
                **task_args["encoder"],
                "attention": attention,
                "node_vocab": list(setting.node_vocab),
                "edge_vocab": list(setting.edge_vocab),
            }
        )
        torch.manual_seed(0)  # every variant starts from the same weights
        self.task = GraphRegression(encoder, OptimConfig(**task_args["optim"]), compile=MODES[mode]).to(device).train()
        use_attention_kernel(self.task, kernel)
        self.task.compile_training_step()
        self.optimizer = adamw(self.task, self.task.optim)
        self.clip = float(config["trainer"].get("gradient_clip_val") or 0.0)
        self.device = device
        self.dtype = PRECISIONS[precision]
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.dtype is torch.float16)
        self.cuda_graphs = mode == "cuda_graphs" and device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision as Lightning's ``precision`` does it (nothing for 32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def __call__(self, batch: GraphBatch) -> None:
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast():
            loss = self.task.training_losses(batch)["loss"]
        self.scaler.scale(loss).backward()
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.task.parameters(), self.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)


class Clock:
    """Seconds of a block: process CPU time on CPU (work done, not waiting on a shared machine), wall time between
    synchronisations on CUDA; tracks the CUDA peak memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __call__(self, fn: Callable[[], None]) -> float:
        if self.device.type != "cuda":
            started = time.process_time()
            fn()
            return time.process_time() - started
        torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - started

    @contextlib.contextmanager
    def peak_memory(self, into: list[int]) -> Iterator[None]:
        """Append the CUDA peak memory (bytes) of the block to ``into`` (nothing on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        yield
        if self.device.type == "cuda":
            into.append(torch.cuda.max_memory_allocated(self.device))


def epoch_batches(
    records: list[GraphRecord],
    batch_size: int,
    batching: str,
    bucket_window: int,
    shape: BatchShape | None,
    device: torch.device,
) -> list[GraphBatch]:
    """The epoch's global batches on ``device``: uniform (``today``) or size-aware (``bucketed``, windows of
    ``bucket_window`` batches), padded to ``shape``."""
    sizes = np.array([len(r.x) for r in records])
    window = {"today": 0, "bucketed": bucket_window}[batching]
    sampler = GlobalBatchSampler(range(len(records)), batch_size, seed=0, sizes=sizes, bucket_window=window)
    return [collate_graphs([records[i] for i in batch], shape).to(device) for batch in sampler.epoch_batches(0)]


def attention_padding(batches: list[GraphBatch]) -> float:
    """Share of the attention entries of ``batches`` (graph token included) that belong to no real pair."""
    useful = padded = 0
    for batch in batches:
        tokens = batch.node_mask.sum(dim=1).cpu() + 1  # (B,) real tokens of each graph; 1 for a padding graph
        real = batch.index.cpu() >= 0
        useful += int((tokens[real] ** 2).sum())
        padded += batch.num_graphs * (batch.x.shape[1] + 1) ** 2
    return 1.0 - useful / padded


def edges_per_node(records: list[GraphRecord]) -> int:
    """The bound of :class:`BatchShape`: the largest ratio of directed edges to nodes, rounded up."""
    return max(1, int(np.ceil(max(r.edge_index.shape[1] / len(r.x) for r in records))))


@dataclass
class Variant:
    """One measured combination and what was measured of it."""

    mode: str
    batching: str
    attention: str
    kernel: str
    step: Step
    batches: list[GraphBatch]
    warm_seconds: float = 0.0
    rounds: list[float] | None = None
    memory: list[int] | None = None

    @property
    def name(self) -> str:
        return f"{self.mode:11} {self.batching:8} {self.attention:4} {self.kernel:6}"

    def distinct_shapes(self) -> list[GraphBatch]:
        """One batch of each distinct shape of the epoch."""
        shapes: dict[tuple, GraphBatch] = {}
        for batch in self.batches:
            shapes.setdefault((tuple(batch.x.shape), tuple(batch.edge_attr.shape)), batch)
        return list(shapes.values())

    def warm_up(self, times: int) -> None:
        """Step ``times`` on a batch of each distinct shape: compilation, capture and caches before any timing."""
        for batch in self.distinct_shapes():
            for _ in range(times):
                self.step(batch)

    def run_epoch(self) -> None:
        """Step on every batch of the epoch."""
        for batch in self.batches:
            self.step(batch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["zinc", "pcqm"], choices=list(SETTINGS))
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=list(MODES))
    parser.add_argument("--batchings", nargs="+", default=["bucketed"], choices=["today", "bucketed"])
    parser.add_argument("--attention", nargs="+", default=["urpe", "rpe"], choices=["urpe", "rpe"])
    parser.add_argument(
        "--kernels",
        nargs="+",
        default=["eager"],
        choices=ATTENTION_KERNELS,
        help="attention kernels (flex: FlexAttention, CUDA only)",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epoch-batches", type=int, default=16, help="global batches of the epoch (>= 16)")
    parser.add_argument("--rounds", type=int, default=3, help="timed epochs per variant (>= 3); the median counts")
    parser.add_argument("--warm", type=int, default=3, help="warm-up steps of each distinct batch shape")
    parser.add_argument("--pad-nodes-to", type=int, default=8, help="node multiple of the compiled modes' batches")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (1 = per-core figures)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="32", choices=list(PRECISIONS))
    parser.add_argument("--json", type=Path, default=None, help="also write every variant's figures to this file")
    args = parser.parse_args(argv)
    if args.epoch_batches < 16 or args.rounds < 3:
        parser.error("steady state takes at least 3 rounds of at least 16 batches")
    if "flex" in args.kernels and not args.device.startswith("cuda"):
        parser.error("the flex kernel trains on CUDA only (torch has no FlexAttention backward on other devices)")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    clock = Clock(device)
    unit = "CPU-second" if device.type == "cpu" else "second"
    print(
        f"torch {torch.__version__}, {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f", {args.threads} threads")
        + f", precision {args.precision}; global batch {args.batch_size}, {args.epoch_batches} batches an epoch, "
        f"each distinct shape warmed {args.warm} times, {args.rounds} timed epochs per variant",
        flush=True,
    )

    results = []
    for setting_name in args.settings:
        setting = SETTINGS[setting_name]
        rng = np.random.default_rng(0)
        records = [
            random_molecule_record(rng, setting.atoms(rng), index, setting.node_vocab, setting.edge_vocab)
            for index in range(args.batch_size * args.epoch_batches)
        ]
        sizes = np.array([len(r.x) for r in records])
        bound = edges_per_node(records)
        variants = []
        for mode in args.modes:
            shape = None if mode == "eager" else BatchShape(args.pad_nodes_to, args.batch_size, bound)
            for batching in args.batchings:
                batches = epoch_batches(records, args.batch_size, batching, setting.bucket_window, shape, device)
                for attention in args.attention:
                    for kernel in args.kernels:
                        step = Step(setting, attention, mode, device, args.precision, kernel)
                        variants.append(Variant(mode, batching, attention, kernel, step, batches))
        padding = ", ".join(
            f"{v.mode}/{v.batching} {attention_padding(v.batches):.0%}"
            for v in variants[:: len(args.attention) * len(args.kernels)]
        )
        print(
            f"\n{setting_name} ({setting.config}): {len(records)} molecules of {sizes.min()}-{sizes.max()} atoms, "
            f"mean {sizes.mean():.1f}; attention entries that are padding: {padding}",
            flush=True,
        )
        for variant in variants:  # every distinct shape, compiled and captured, before any timing
            variant.warm_seconds = clock(functools.partial(variant.warm_up, args.warm))
            print(
                f"  warmed {variant.name}: {len(variant.distinct_shapes())} shapes in {variant.warm_seconds:.1f} s",
                flush=True,
            )
            variant.rounds, variant.memory = [], []
        for round_index in range(args.rounds):
            for variant in variants if round_index % 2 == 0 else variants[::-1]:
                with clock.peak_memory(variant.memory):
                    variant.rounds.append(clock(variant.run_epoch))
        graphs = args.batch_size * args.epoch_batches
        print(
            f"  {'mode':11} {'batching':8} {'att.':4} {'kernel':6}  graphs/{unit} median [slowest, fastest]"
            "   ms/step   warm-up s" + ("   peak GiB" if device.type == "cuda" else "")
        )
        for variant in variants:
            median, slowest, fastest = (statistics.median(variant.rounds), max(variant.rounds), min(variant.rounds))
            line = (
                f"  {variant.name}  {graphs / median:8.0f} [{graphs / slowest:6.0f}, {graphs / fastest:6.0f}]"
                f"{1000 * median / args.epoch_batches:19.1f} {variant.warm_seconds:11.1f}"
            )
            if variant.memory:
                line += f" {max(variant.memory) / 2**30:10.2f}"
            print(line, flush=True)
        results += [
            {
                "setting": setting_name,
                "config": setting.config,
                "precision": args.precision,
                "batch_size": args.batch_size,
                "epoch_batches": args.epoch_batches,
                "rounds": args.rounds,
                "mode": v.mode,
                "batching": v.batching,
                "attention": v.attention,
                "kernel": v.kernel,
                "graphs_per_second": graphs / statistics.median(v.rounds),
                "graphs_per_second_rounds": [graphs / seconds for seconds in v.rounds],
                "ms_per_step": 1000 * statistics.median(v.rounds) / args.epoch_batches,
                "warm_seconds": v.warm_seconds,
                "shapes": len(v.distinct_shapes()),
                "peak_gib": max(v.memory) / 2**30 if v.memory else None,
            }
            for v in variants
        ]
        if args.json is not None:  # after every setting: a run cut later keeps what it measured
            args.json.write_text(
                json.dumps({"device": str(device), "torch": torch.__version__, "results": results}, indent=2) + "\n"
            )
        print_ratios(variants, unit)


def print_ratios(variants: list[Variant], unit: str) -> None:
    """Each variant against the one that differs from it in one choice only: mode, attention, batching or kernel."""
    by_key = {(v.mode, v.batching, v.attention, v.kernel): statistics.median(v.rounds) for v in variants}
    peak = {(v.mode, v.batching, v.attention, v.kernel): max(v.memory) for v in variants if v.memory}
    for (mode, batching, attention, kernel), seconds in by_key.items():
        if mode != "eager" and ("eager", batching, attention, kernel) in by_key:
            eager = by_key["eager", batching, attention, kernel]
            print(f"  {mode} / eager, {batching} {attention} {kernel}: {eager / seconds:.2f}x graphs per {unit}")
        if attention == "urpe" and (mode, batching, "rpe", kernel) in by_key:
            rpe = by_key[mode, batching, "rpe", kernel]
            print(f"  URPE / RPE time per step, {mode} {batching} {kernel}: {seconds / rpe:.3f}")
        if batching == "bucketed" and (mode, "today", attention, kernel) in by_key:
            uniform = by_key[mode, "today", attention, kernel]
            print(f"  size-aware / uniform, {mode} {attention} {kernel}: {uniform / seconds:.2f}x")
        eager_kernel = (mode, batching, attention, "eager")
        if kernel == "flex" and eager_kernel in by_key:
            line = f"  flex / eager kernel, {mode} {batching} {attention}: {by_key[eager_kernel] / seconds:.2f}x graphs"
            if eager_kernel in peak:
                line += f", peak memory {peak[mode, batching, attention, kernel] / peak[eager_kernel]:.2f}x"
            print(line)


if __name__ == "__main__":
    sys.exit(exit_code(main))
