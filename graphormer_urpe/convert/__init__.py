"""Checkpoint converters: other Graphormer implementations' weights, and our own earlier layout, as ours.

``python -m graphormer_urpe.convert {official,huggingface,upgrade} SRC OUT.ckpt``; see
``docs/official-graphormer.md`` and ``docs/tasks.md``. Nothing in the library imports this package.
"""
