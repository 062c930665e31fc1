"""The exit codes of every ``graphormer-urpe`` command, in one table (docs/running.md#exit-codes), and the one place
that turns what stops a command into its code: :func:`exit_codes`.

    with exit_codes():
        return work()
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator

from graphormer_urpe.errors import EXIT_BAD_INPUT, InputError, NonFiniteLoss, Refused, SeedsUnfinished, SubmissionError

log = logging.getLogger("graphormer_urpe")

#: Done.
OK = 0
#: ``evaluate``: a leaderboard submission that the leaderboard would refuse.
INVALID_SUBMISSION = 1
#: Bad input (an option, a file, a table, a checkpoint, an output that exists), refused in one line before any
#: work where the input decides it.
BAD_INPUT = EXIT_BAD_INPUT
#: ``train``: the loss became NaN or infinite.
NON_FINITE_LOSS = 3
#: ``sweep``: seeds that did not finish (the last line names each one's cause); the summary covers the others.
FAILED_SEEDS = 4
#: 128 + the signal's number: a signal stopped the command (``train`` wrote ``last.ckpt`` first).
SIGNALLED = 128
#: Ctrl-C (128 + SIGINT).
INTERRUPTED = SIGNALLED + signal.SIGINT

#: Every exit code, as docs/running.md tabulates it (tests/commands/test_exits.py compares the two).
EXIT_CODES: dict[str, str] = {
    str(OK): "done",
    str(INVALID_SUBMISSION): "evaluate: a leaderboard submission the leaderboard would refuse",
    str(BAD_INPUT): "bad input: one line naming the option, file, row or key, before any work the input decides",
    str(NON_FINITE_LOSS): "train: the loss became NaN or infinite",
    str(FAILED_SEEDS): "sweep: seeds that did not finish, each one's cause in the last line",
    f"{SIGNALLED} + signal": "a signal stopped it after writing last.ckpt: 130 Ctrl-C, 138 SIGUSR1, 143 SIGTERM",
}


@contextlib.contextmanager
def exit_codes(finish: Callable[[int, bool], None] | None = None) -> Iterator[None]:
    """Run a command's work and exit (``sys.exit``) with the code of what stopped it: :data:`BAD_INPUT` on an
    :class:`~graphormer_urpe.errors.InputError` (its message on one line, no traceback), :data:`INVALID_SUBMISSION`,
    :data:`NON_FINITE_LOSS`, :data:`FAILED_SEEDS`, 128 + the signal after a signal (:data:`INTERRUPTED` for Ctrl-C).
    ``finish(code, interrupted)`` runs whatever happens, before the exit (``train`` closes W&B and lets its run
    directory go there); ``interrupted``: a KeyboardInterrupt stopped it (a second Ctrl-C, or one outside training),
    not a checkpointing signal handler."""
    # imported here, not with the table of codes: ``graphormer-urpe --help`` and ``--version`` read that table, and
    # Lightning's import (some 8 s) would be all their time
    from lightning_fabric.utilities.rank_zero import rank_zero_only
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from graphormer_urpe.run.callbacks import Preempted

    exit_code, refusal, interrupted = OK, "", False
    try:
        yield
    except InputError as error:
        log.error("%s", error)
        exit_code, refusal = BAD_INPUT, str(error)
    except SubmissionError as error:
        log.error("%s", error)
        exit_code = INVALID_SUBMISSION
    except NonFiniteLoss as error:
        log.error("%s", error)
        exit_code = NON_FINITE_LOSS
    except SeedsUnfinished as error:
        log.error("%s", error)
        exit_code = FAILED_SEEDS
    except Preempted as stop:  # train's own checkpointing handler: last.ckpt is written
        if rank_zero_only.rank == 0:  # every process of a DDP run stops so; one says why
            log.warning("%s", stop)
        exit_code = stop.exit_code
    except SIGTERMException:  # Lightning's handler, outside the training loop (set-up, final evaluation)
        log.warning("SIGTERM received outside training steps")
        exit_code = SIGNALLED + signal.SIGTERM
    except KeyboardInterrupt:
        exit_code, interrupted = INTERRUPTED, True
    except SystemExit as stop:
        if not isinstance(stop.__context__, KeyboardInterrupt):
            raise
        exit_code, interrupted = INTERRUPTED, True  # Lightning stops on a KeyboardInterrupt with exit code 1
    finally:
        if finish is not None:
            finish(exit_code, interrupted)
    if refusal:
        raise Refused(refusal) from None  # exit code 2, the message its text (logged above)
    if exit_code:
        sys.exit(exit_code)
