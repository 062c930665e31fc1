"""Synthetic tasks of the URPE paper: regular graphs and sequences, generated on the fly."""
