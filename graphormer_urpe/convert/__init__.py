"""Checkpoint converters: other Graphormer implementations' weights, and our own earlier layout, as ours.

    python -m graphormer_urpe.convert official SRC.pt OUT.ckpt        # microsoft/Graphormer v1.0 or v2
    python -m graphormer_urpe.convert huggingface SRC_DIR OUT.ckpt    # transformers' Graphormer
    python -m graphormer_urpe.convert upgrade OLD.ckpt NEW.ckpt       # ours, before the task family was merged

The first two write ``OUT.ckpt`` (an RPE model in our layout, for ``train.py --init_from`` and
``GraphormerTask.from_checkpoint``) and ``OUT.yaml`` (the architecture, to pass after the dataset's
config). :mod:`~graphormer_urpe.convert.official` and :mod:`~graphormer_urpe.convert.huggingface`
read each format's weights and settings, :mod:`~graphormer_urpe.convert.mapping` maps the tensors of
the whole Graphormer family, :mod:`~graphormer_urpe.convert.common` reads and writes files
(``docs/official-graphormer.md``). :mod:`~graphormer_urpe.convert.upgrade` rewrites a checkpoint of
``train.py`` written before issue 13 in today's layout (``docs/tasks.md``). Nothing in the library
imports this package.
"""
