"""``python train.py ...`` is ``graphormer-urpe train ...`` (:mod:`graphormer_urpe.commands.train`), for a checkout."""

from graphormer_urpe.commands.train import main

if __name__ == "__main__":
    main()
