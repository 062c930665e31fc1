"""``graphormer-urpe convert``: other Graphormer implementations' checkpoints, and our own earlier
layout, as ours (``docs/official-graphormer.md``, ``docs/tasks.md``). Nothing in the library imports it."""
