"""The training step's forward and loss through ``torch.compile``: one whole graph (``fullgraph=True``, no graph
break), static shapes, optionally replayed as CUDA graphs; docs/throughput.md, "A compiled step".

    mode False          eager: every op dispatched from Python (the default)
    mode True           Inductor: fused kernels, one compilation per batch shape
    mode "cuda_graphs"  Inductor with CUDA graphs (``mode="reduce-overhead"``): one launch per shape on CUDA

Static shapes (``dynamic=False``) make each new batch shape a new compilation, so batches should come in few shapes:
``--data.pad_nodes_to`` pads every training batch to a multiple of a node count (docs/throughput.md). Each
compilation takes seconds to minutes (46 s for the first on a CPU), so each is announced in one log line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TypeVar

import torch

from graphormer_urpe.errors import check_choice

log = logging.getLogger(__name__)

#: What ``--model.compile`` takes: eager (False), Inductor (True), Inductor with CUDA graphs ("cuda_graphs"). A
#: ``str`` rather than a Literal, so that a wrong word is refused naming every choice
#: (:func:`check_compile_mode`).
CompileMode = bool | str
COMPILE_MODES = (False, True, "cuda_graphs")
#: Compilations kept per compiled function (one per batch shape) before torch falls back to eager; torch's own
#: default (8) is the count an epoch of ``pad_nodes_to: 8`` batches at PCQM4Mv2's sizes may reach.
MAX_SHAPES = 64
F = TypeVar("F", bound=Callable)


def check_compile_mode(mode: object) -> None:
    """Refuse (ConfigError) a value ``--model.compile`` does not take."""
    check_choice("model.compile", mode, COMPILE_MODES)


def inductor_workarounds() -> None:
    """Settings that known Inductor bugs of the installed torch need. torch 2.11's tiling analysis stops with an
    AssertionError in ``get_pw_red_splits`` under some fused reductions (pytorch/pytorch#181563, fixed in 2.12):
    its documented switch turns the analysis off."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 12):
        torch._inductor.config.triton.coalesce_tiling_analysis = False


def compiled(
    fn: F,
    mode: CompileMode,
    device: torch.device,
    backend: str | Callable = "inductor",
    shape_of: Callable[..., str] | None = None,
) -> F:
    """``fn`` compiled as one whole graph with static shapes; ``mode`` as in the module docstring (False returns
    ``fn``). CUDA graphs need a CUDA device: elsewhere ``cuda_graphs`` compiles without them, with a warning.
    ``backend``: Inductor, or another ``torch.compile`` backend (tests count graphs with one). ``shape_of``: the
    shape of ``fn``'s arguments in words, telling apart every shape it compiles for; with it, each new shape is
    logged (:func:`announcing_shapes`)."""
    check_compile_mode(mode)
    if mode is False:
        return fn
    inductor_workarounds()
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, MAX_SHAPES)
    graphs = mode == "cuda_graphs" and device.type == "cuda"
    if mode == "cuda_graphs" and not graphs:
        log.warning(
            "model.compile=cuda_graphs: CUDA graphs need a CUDA device, this run is on %s; compiling without them",
            device,
        )
    if backend != "inductor":  # other backends take no mode
        step = torch.compile(fn, fullgraph=True, dynamic=False, backend=backend)
    else:
        step = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if graphs else "default")
    return step if shape_of is None else announcing_shapes(step, shape_of)


def announcing_shapes(step: F, shape_of: Callable[..., str]) -> F:
    """``step``, logging one line when it is called with a shape it has not met (``shape_of`` its arguments): the
    shape and how many it has compiled so far. A compilation per shape otherwise passed without a word: on a CPU,
    46 s for the first, then about 20 s a step while every batch brought a new shape."""
    shapes: set[str] = set()

    @functools.wraps(step)
    def announced(*args: object) -> object:
        shape = shape_of(*args)
        if shape not in shapes:
            shapes.add(shape)
            log.info(
                "model.compile: compiling the training step for a new batch shape, %s (%d shape%s compiled so "
                "far; torch keeps at most %d)",
                shape,
                len(shapes),
                "" if len(shapes) == 1 else "s",
                MAX_SHAPES,
            )
        return step(*args)

    return announced


def uses_cuda_graphs(mode: CompileMode, device: torch.device) -> bool:
    """Whether :func:`compiled` replays CUDA graphs for ``mode`` on ``device``."""
    return mode == "cuda_graphs" and device.type == "cuda"
