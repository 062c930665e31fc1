"""``python seeds.py ...`` is ``graphormer-urpe sweep ...`` (:mod:`graphormer_urpe.commands.sweep`), for a checkout."""

from graphormer_urpe.commands.sweep import main

if __name__ == "__main__":
    main()
