"""``python seeds.py ...``: the sweep over seeds (:mod:`graphormer_urpe.commands.sweep`)."""

from graphormer_urpe.commands.sweep import main

if __name__ == "__main__":
    main()
