"""Start a run from the weights of another one: in particular a trained RPE model as a URPE model.

The paper (section 4.2): "we can fine-tune any well-trained RPE-based Transformer to its URPE-based
counterpart by setting C as an all-one matrix". With C = 1 the URPE attention equals the RPE
attention exactly, so the converted model predicts what the RPE model predicted, and fine-tuning
then learns C. ``python train.py --config CONFIG --init_from RPE.ckpt`` does this.
"""

from __future__ import annotations

import logging
from pathlib import Path

from torch import nn

from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.attention import RelativeScale
from graphormer_urpe.run.checkpoints import load_checkpoint, state_dict_problems

log = logging.getLogger(__name__)


def init_from_checkpoint(task: nn.Module, path: str | Path) -> list[str]:
    """Load every tensor of a checkpoint into ``task``; URPE tables C it lacks are set to ones.

    The two must have the same architecture apart from C: any other missing, unexpected or
    differently shaped tensor raises :class:`CheckpointError` naming it. An RPE checkpoint loaded
    into a URPE task therefore yields a model whose outputs equal the RPE model's; a URPE checkpoint
    keeps its C.

    Args:
        task: the freshly built LightningModule (or any module) of the new run.
        path: a Lightning checkpoint (``state_dict`` inside) written by ``train.py``.

    Returns:
        The names of the C tables that were set to ones.
    """
    source = load_checkpoint(path)["state_dict"]
    target = task.state_dict()
    scales = {f"{name}.weight": module for name, module in task.named_modules() if isinstance(module, RelativeScale)}
    reset = [key for key in scales if key not in source]
    problems = state_dict_problems(source, {k: v for k, v in target.items() if k not in reset})
    if problems:
        raise CheckpointError("\n".join([
            f"--init_from {path} does not fit the configured model (only URPE's C may be absent from it):",
            *[f"  - {p}" for p in problems],
        ]))
    task.load_state_dict(source, strict=False)
    for key in reset:
        scales[key].reset_to_ones()
    log.info("initialised from %s: %d tensors loaded%s", path, len(source),
             f"; URPE C set to ones: {', '.join(reset)}" if reset else "")
    return reset
