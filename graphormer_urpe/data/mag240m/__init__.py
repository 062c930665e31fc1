"""MAG240M: release reader, neighbour sampler, batched structure, shared-memory slots, compact batch, datamodule."""
