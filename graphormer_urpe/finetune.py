"""Start a run from the weights of another one: in particular a trained RPE model as a URPE model.

The paper (section 4.2): "we can fine-tune any well-trained RPE-based Transformer to its URPE-based
counterpart by setting C as an all-one matrix". With C = 1 the URPE attention equals the RPE
attention exactly, so the converted model predicts what the RPE model predicted, and fine-tuning
then learns C. ``python train.py --config CONFIG --init_from RPE.ckpt`` does this.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from graphormer_urpe.model.attention import RelativeScale

log = logging.getLogger(__name__)


def init_from_checkpoint(task: nn.Module, path: str | Path) -> list[str]:
    """Load every tensor of a checkpoint into ``task``; URPE tables C it lacks are set to ones.

    The two must have the same architecture apart from C: any other missing, unexpected or
    differently shaped tensor is an error that names it. An RPE checkpoint loaded into a URPE task
    therefore yields a model whose outputs equal the RPE model's; a URPE checkpoint keeps its C.

    Args:
        task: the freshly built LightningModule (or any module) of the new run.
        path: a Lightning checkpoint (``state_dict`` inside) written by ``train.py``.

    Returns:
        The names of the C tables that were set to ones.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--init_from {path}: no such checkpoint")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if "state_dict" not in checkpoint:
        raise ValueError(f"--init_from {path}: not a Lightning checkpoint (no 'state_dict')")
    source = checkpoint["state_dict"]
    target = task.state_dict()
    scales = {f"{name}.weight": module for name, module in task.named_modules() if isinstance(module, RelativeScale)}
    missing = [key for key in target if key not in source]
    problems = [f"missing {key}" for key in missing if key not in scales]
    problems += [f"unexpected {key}" for key in source if key not in target]
    problems += [
        f"{key}: checkpoint {tuple(source[key].shape)} vs model {tuple(target[key].shape)}"
        for key in source if key in target and source[key].shape != target[key].shape
    ]
    if problems:
        raise ValueError(f"--init_from {path} does not match this model ({len(problems)} problems: "
                         f"{'; '.join(problems[:8])}); only URPE's C may be absent from the checkpoint")
    task.load_state_dict(source, strict=False)
    for key in missing:
        scales[key].reset_to_ones()
    log.info("initialised from %s: %d tensors loaded%s", path, len(source),
             f"; URPE C set to ones: {', '.join(missing)}" if missing else "")
    return missing
