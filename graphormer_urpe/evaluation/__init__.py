"""Predictions after training: whole splits, new molecules, saved ensembles and the descriptor trees' blend,
OGB-LSC submission files."""
