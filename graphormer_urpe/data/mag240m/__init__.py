"""MAG240M: release reader, derived files, memory-mapped graph, neighbour sampler, batched structure,
shared-memory slots, compact batch, datamodule."""
