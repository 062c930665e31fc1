"""MAG240M: release, derived files and graph, sampler and compact batch, batched structure, slots, datamodule."""
