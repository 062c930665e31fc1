"""The paper's synthetic experiments at laptop scale: every method on every task, one table, three figures.

    python bench/synthetic/synthetic_results.py                         # everything, ~1 hour on 2 shared CPU cores
    python bench/synthetic/synthetic_results.py --only graph --retrain  # one family again

Trains through ``train.py`` (one subprocess per run, so every run has its own run directory, config
and checkpoints under ``--run_root``) and reads each run's ``metrics.json``:

* Position Identification and Even Token Prediction (``configs/synthetic_{pi,etp}.yaml``) for each
  vocabulary size and ``attention: none | rpe | urpe``, test token accuracy;
* the regular-graph task (``configs/synthetic_graph.yaml``) with RPE and URPE without graph token,
  RPE with the graph token, and RPE -> URPE: a URPE run started from the RPE run's checkpoint
  (``--init_from``, C = 1), test node accuracy.

Writes to ``--out``: ``results.md`` (the table), ``results.json``, ``accuracy.png`` (like the
paper's Figure 1), and heatmaps of the learned B and C of the URPE runs (like its Figure 2).
Runs that already have a ``metrics.json`` are reused unless ``--retrain`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO, TRAIN
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.run.plots import relative_encoding_figure
from graphormer_urpe.tasks import Classification, SequenceTagging

METHOD_NAMES = {"none": "noPE", "rpe": "RPE", "urpe": "URPE"}
GRAPH_METHODS = ["RPE", "URPE", "RPE + graph token", "RPE -> URPE"]
TASK_NAMES = {"pi": "Position Identification", "etp": "Even Token Prediction"}


@dataclass
class Run:
    """One training run of the plan."""

    name: str
    config: str
    setting: str
    method: str
    args: list[str] = field(default_factory=list)
    init_from: str | None = None  # name of the run whose best checkpoint starts this one


def accuracy_figure(
    results: dict[str, dict[str, float]],
    methods: Sequence[str],
    title: str = "",
    baselines: dict[str, float] | None = None,
) -> Figure:
    """Grouped bars of accuracy per setting and method, like the paper's Figure 1.

    Args:
        results: ``{setting: {method: accuracy in [0, 1]}}``, settings in drawing order; a setting may
            have only some of the methods.
        methods: every method, in bar order (fixes each method's colour).
        title: figure title.
        baselines: ``{setting: accuracy}`` of a trivial predictor, drawn as a dashed line per group.
    """
    figure = Figure(figsize=(1.6 + 1.7 * len(results), 3.4), layout="constrained")
    ax = figure.subplots()
    colours = {method: f"C{k}" for k, method in enumerate(methods)}
    drawn: set[str] = set()
    for i, (setting, scores) in enumerate(results.items()):
        present = [m for m in methods if m in scores]
        width = 0.8 / max(len(present), 1)
        for k, method in enumerate(present):
            x = i + (k - (len(present) - 1) / 2) * width
            bar = ax.bar(x, scores[method], width, color=colours[method], label=None if method in drawn else method)
            ax.bar_label(bar, labels=[f"{scores[method]:.2f}"], fontsize=6, padding=1)
            drawn.add(method)
        if baselines and setting in baselines:
            ax.hlines(baselines[setting], i - 0.45, i + 0.45, colors="k", linestyles="dashed", linewidth=0.8)
    ax.set_xticks(range(len(results)), list(results), fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("test accuracy")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=min(len(drawn), 5), frameon=False)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def plan(vocab_sizes: list[int], only: list[str]) -> list[Run]:
    """Every run, in an order where a run comes after the run it starts from."""
    runs = []
    for task in ("pi", "etp"):
        if task not in only:
            continue
        for vocab in vocab_sizes:
            for attention, method in METHOD_NAMES.items():
                runs.append(
                    Run(
                        f"{task}_v{vocab}_{attention}",
                        f"synthetic_{task}",
                        f"{task.upper()} |V|={vocab}",
                        method,
                        ["--model.encoder.attention", attention, "--data.vocab_size", str(vocab)],
                    )
                )
    if "graph" in only:
        setting = "graph, #nodes at distance 2"
        runs += [
            Run("graph_rpe", "synthetic_graph", setting, "RPE", ["--model.encoder.attention", "rpe"]),
            Run("graph_urpe", "synthetic_graph", setting, "URPE", ["--model.encoder.attention", "urpe"]),
            Run(
                "graph_rpe_token",
                "synthetic_graph",
                setting,
                "RPE + graph token",
                ["--model.encoder.attention", "rpe", "--model.encoder.graph_token", "true"],
            ),
            Run(
                "graph_rpe_to_urpe",
                "synthetic_graph",
                setting,
                "RPE -> URPE",
                ["--model.encoder.attention", "urpe"],
                init_from="graph_rpe",
            ),
        ]
    return runs


def train(run: Run, run_root: Path, threads: int, steps: int | None, retrain: bool) -> dict:
    """Train one run (or reuse its finished directory); returns its metrics.json plus the wall time."""
    run_dir = run_root / run.name
    metrics_path = run_dir / "metrics.json"
    if metrics_path.is_file() and not retrain:
        return json.loads(metrics_path.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [
        *TRAIN,
        "--config",
        run.config,
        *run.args,
        "--run_root",
        str(run_root),
        "--run_name",
        run.name,
        "--trainer.enable_progress_bar",
        "false",
    ]
    if steps is not None:  # e.g. a quick check of the whole pipeline: validate once, at the end
        command += ["--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps)]
    if run.init_from is not None:
        source = json.loads((run_root / run.init_from / "metrics.json").read_text())["best_checkpoint"]
        if source is None:
            raise SystemExit(f"{run.init_from} has no best checkpoint to start {run.name} from")
        command += ["--init_from", source]
    env = {k: v for k, v in os.environ.items() if k != RUN_DIR_ENV}
    env["OMP_NUM_THREADS"] = str(threads)  # tiny models: competing threads on a shared CPU only slow down
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(run_dir / "train.log", "w") as log:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{run.name} failed (exit {done.returncode}); see {run_dir / 'train.log'}")
    metrics = json.loads(metrics_path.read_text())
    metrics["seconds"] = round(time.perf_counter() - start, 1)
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def markdown_table(runs: list[Run], results: dict[str, dict], majority: float | None) -> str:
    """One row per setting, one column per method; test accuracy of the best-validation checkpoint."""
    lines = []
    sequence_runs = [r for r in runs if r.config != "synthetic_graph"]
    if sequence_runs:
        lines += ["| task | vocabulary | noPE | RPE | URPE |", "|---|---|---|---|---|"]
        settings = dict.fromkeys(r.setting for r in sequence_runs)
        for setting in settings:
            task, vocab = setting.split(" ")
            row = {r.method: results[r.name]["test"]["test/accuracy"] for r in sequence_runs if r.setting == setting}
            cells = " | ".join(f"{row[m]:.3f}" for m in METHOD_NAMES.values())
            lines.append(f"| {TASK_NAMES[task.lower()]} | {vocab.split('=')[1]} | {cells} |")
    graph_runs = [r for r in runs if r.config == "synthetic_graph"]
    if graph_runs:
        lines += [
            "",
            "| graph task | majority label | " + " | ".join(GRAPH_METHODS) + " |",
            "|---|---|" + "---|" * len(GRAPH_METHODS),
        ]
        row = {r.method: results[r.name]["test"]["test/accuracy"] for r in graph_runs}
        cells = " | ".join(f"{row[m]:.3f}" if m in row else "-" for m in GRAPH_METHODS)
        lines.append(f"| 3-regular, 12-24 nodes, label = #nodes at distance 2 | {majority:.3f} | {cells} |")
    return "\n".join(lines) + "\n"


def draw_heatmaps(runs: list[Run], results: dict[str, dict], out: Path) -> list[Path]:
    """B and C of every URPE run of the smallest vocabulary, and of the graph URPE run."""
    drawn = []
    chosen = [r for r in runs if r.name.endswith("_urpe") and (r.name.startswith("graph") or "_v10_" in r.name)]
    for run in chosen:
        task_class = Classification if run.config == "synthetic_graph" else SequenceTagging
        task = task_class.from_checkpoint(results[run.name]["best_checkpoint"])
        accuracy = results[run.name]["test"]["test/accuracy"]
        figure = relative_encoding_figure(
            task.model, title=f"{run.setting}, {run.method}: learned B and C (test accuracy {accuracy:.3f})"
        )
        path = out / f"{run.name}_BC.png"
        figure.savefig(path, dpi=90)
        drawn.append(path)
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "synthetic", help="where table and figures go")
    parser.add_argument("--run_root", type=Path, default=REPO / "runs" / "synthetic", help="run directories")
    parser.add_argument("--vocab", type=int, nargs="+", default=[10, 1000], help="vocabulary sizes |V|")
    parser.add_argument("--only", nargs="+", default=["pi", "etp", "graph"], choices=["pi", "etp", "graph"])
    parser.add_argument(
        "--steps", type=int, default=None, help="override every config's max_steps (and validate only at the end)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--retrain", action="store_true", help="train again even if a run has finished")
    options = parser.parse_args()

    runs = plan(options.vocab, options.only)
    results: dict[str, dict] = {}
    for k, run in enumerate(runs, 1):
        print(f"[{k}/{len(runs)}] {run.setting:<32} {run.method:<18} ", end="", flush=True)
        results[run.name] = train(run, options.run_root, options.threads, options.steps, options.retrain)
        metrics = results[run.name]
        print(
            f"test accuracy {metrics['test']['test/accuracy']:.3f}  ({metrics.get('seconds', 0) / 60:.1f} min)",
            flush=True,
        )

    majority = None
    if "graph" in options.only:
        dataset = json.loads((options.run_root / "graph_rpe" / "run.json").read_text())["dataset"]
        majority = dataset["majority_label_accuracy"]["test"]
    options.out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(runs, results, majority)
    (options.out / "results.md").write_text(table)
    (options.out / "results.json").write_text(
        json.dumps(
            {
                run.name: {
                    "setting": run.setting,
                    "method": run.method,
                    "test_accuracy": results[run.name]["test"]["test/accuracy"],
                    "minutes": round(results[run.name].get("seconds", 0) / 60, 1),
                }
                for run in runs
            },
            indent=2,
        )
        + "\n"
    )
    bars: dict[str, dict[str, float]] = {}
    for run in runs:
        bars.setdefault(run.setting.replace(", #nodes at distance 2", ""), {})[run.method] = results[run.name]["test"][
            "test/accuracy"
        ]
    baselines = {"graph": majority} if majority is not None else None
    accuracy_figure(
        bars,
        [*METHOD_NAMES.values(), *GRAPH_METHODS[2:]],
        baselines=baselines,
        title="Synthetic tasks, test accuracy (dashed: majority label)",
    ).savefig(options.out / "accuracy.png", dpi=90)
    figures = draw_heatmaps(runs, results, options.out)
    print(table)
    print("wrote", options.out / "results.md", options.out / "accuracy.png", *figures)


if __name__ == "__main__":
    main()
