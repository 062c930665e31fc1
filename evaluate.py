"""``python evaluate.py ...`` is ``graphormer-urpe evaluate ...`` (:mod:`graphormer_urpe.commands.evaluate`), for a
checkout; ``python evaluate.py --ckpt CKPT --predict TABLE --out FILE`` is ``graphormer-urpe predict --model CKPT
TABLE --out FILE`` (:mod:`graphormer_urpe.commands.predict`). The options' earlier spellings (``--smiles-column``,
``--submission-dir``, ``--check-submission``, ``--allow-other-data``, ``--data-root``) still work here."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphormer_urpe.commands import evaluate, predict

#: evaluate.py's earlier option spellings, and today's (underscores, as every command spells its options).
RENAMED = {
    "--smiles-column": "--smiles_column",
    "--submission-dir": "--submission_dir",
    "--check-submission": "--check_submission",
    "--allow-other-data": "--allow_other_data",
    "--data-root": "--data_root",
}


def today(argv: Sequence[str]) -> list[str]:
    """``argv`` with every option spelled as today, ``--name=value`` split in two."""
    args = []
    for arg in argv:
        name, equals, value = arg.partition("=")
        if name in {*RENAMED, "--ckpt", "--predict"}:
            args += [RENAMED.get(name, name), *([value] if equals else [])]
        else:
            args.append(arg)
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    args = today(sys.argv[1:] if argv is None else argv)
    if "--predict" not in args:
        return evaluate.main(args)
    at = args.index("--predict")
    table, rest = args[at + 1 : at + 2], args[:at] + args[at + 2 :]
    if "--ckpt" in rest:
        rest[rest.index("--ckpt")] = "--model"
    return predict.main([*table, *rest])


if __name__ == "__main__":
    main()
