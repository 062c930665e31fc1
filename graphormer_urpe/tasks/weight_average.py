"""An exponential moving average of a network's weights (``model.optim.weight_average``), the weights a run is
judged and saved with (docs/tasks.md, "Weight averaging").

After optimiser step t, with decay d and the weights w_t the step left,

    a_t = d * a_{t-1} + (1 - d) * w_t,        a_0 = the weights training started from

(Polyak averaging with exponential forgetting: a_t weighs the step s weights by (1 - d) d^(t - s), so about the last
1 / (1 - d) steps count). Training updates w; every validation, and every checkpoint written from a validation's start
to the next training step (the best checkpoints among them), sees a instead: :meth:`WeightAverage.swap_in` puts a into
the network's parameters in place and keeps w, :meth:`WeightAverage.swap_out` gives w back before the next step. So
whatever reads a best checkpoint (``predict``, ``ensemble``, ``--init_from``, ``convert``) reads the averaged weights
without knowing of them, and a run resumed from any checkpoint continues with the same w and a (both are in it:
:meth:`WeightAverage.state_dict`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def average_dtype(parameter: torch.Tensor) -> torch.dtype:
    """float32 at least: in bfloat16 (8 bits of mantissa) a step's (1 - d) x (w - a) would mostly round away."""
    return torch.promote_types(parameter.dtype, torch.float32)


class WeightAverage:
    """The running average of ``network``'s parameters (on their device, in float32 or their dtype if wider), and
    the training weights it stands in for while swapped in.

    Args:
        decay: d in (0, 1), the share of the average each optimiser step keeps.
        network: the module whose parameters are averaged (the task's ``model``), at the weights training starts
            from.
    """

    def __init__(self, decay: float, network: nn.Module) -> None:
        self.decay = decay
        self.parameters = list(network.parameters())
        #: a: one tensor per parameter, in ``network.parameters()`` order.
        self.average = [parameter.detach().to(average_dtype(parameter), copy=True) for parameter in self.parameters]
        #: w while a is swapped into the parameters (a validation or what follows it), else None.
        self.training_weights: list[torch.Tensor] | None = None

    @property
    def swapped_in(self) -> bool:
        """Whether the parameters hold the average now (and :attr:`training_weights` the weights training updates)."""
        return self.training_weights is not None

    @torch.no_grad()
    def update(self) -> None:
        """a <- d a + (1 - d) w after an optimiser step (the parameters hold w: training never runs swapped in)."""
        weights = [parameter.detach().to(average.dtype) for parameter, average in zip(self.parameters, self.average)]
        torch._foreach_lerp_(self.average, weights, 1.0 - self.decay)

    @torch.no_grad()
    def swap_in(self) -> None:
        """Put the average into the parameters, in place (the optimiser keeps its tensors; rounded to their dtype),
        keeping w aside."""
        if self.swapped_in:
            return
        self.training_weights = [parameter.detach().clone() for parameter in self.parameters]
        torch._foreach_copy_([parameter.detach() for parameter in self.parameters], self.average)

    @torch.no_grad()
    def swap_out(self) -> None:
        """Give the parameters back the training weights w kept by :meth:`swap_in`."""
        if self.training_weights is None:
            return
        torch._foreach_copy_([parameter.detach() for parameter in self.parameters], self.training_weights)
        self.training_weights = None

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of it: the average and, while swapped in, the training weights (tensors and
        lists only: a checkpoint loads with ``weights_only``)."""
        return {"average": self.average, "training_weights": self.training_weights}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the average (and the training weights, if it was saved swapped in) of :meth:`state_dict`, onto the
        parameters' devices, each in its dtype as saved."""
        if len(state["average"]) != len(self.parameters):
            raise ValueError(
                f"the checkpoint's weight average holds {len(state['average'])} tensors, the network "
                f"{len(self.parameters)} parameters"
            )

        def onto_parameters(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
            return [tensor.to(parameter.device, copy=True) for tensor, parameter in zip(tensors, self.parameters)]

        self.average = onto_parameters(state["average"])
        kept = state["training_weights"]
        self.training_weights = None if kept is None else onto_parameters(kept)
