"""Predictions after training: whole splits, new molecules, OGB-LSC submission files."""
