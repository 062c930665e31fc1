"""Graphormer + URPE in a plain PyTorch Geometric loop: HOMO-LUMO gaps of 500 QM9 molecules (TU layout).

    python examples/pyg_loop.py [ROOT] [EPOCHS]      # ROOT: where PyG processes the data (data/pyg_loop)

It runs on CUDA when there is a GPU, else on the CPU.
"""

import shutil
import sys
from pathlib import Path

import torch
from torch_geometric.datasets import TUDataset
from torch_geometric.loader import DataLoader

from graphormer_urpe import Graphormer, GraphormerStructure

root = Path(sys.argv[1] if len(sys.argv) > 1 else "data/pyg_loop")
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
shutil.copytree(Path(__file__).parent / "tu" / "QM9SAMPLE" / "raw", root / "QM9SAMPLE" / "raw", dirs_exist_ok=True)
dataset = TUDataset(root, "QM9SAMPLE", use_node_attr=True, use_edge_attr=True, pre_transform=GraphormerStructure())
train, test = dataset[:450], dataset[450:]
mean = torch.cat([graph.y for graph in train]).mean()  # predict the gap's offset from the training mean

device = "cuda" if torch.cuda.is_available() else "cpu"
model = Graphormer(
    num_layers=4,
    hidden_dim=64,
    ffn_dim=64,
    num_heads=8,
    dropout=0.0,
    attention_dropout=0.0,
    node_vocab=[1],
    edge_vocab=[1],  # no integer features: TU labels arrive one-hot, as floats
    continuous_node_dim=dataset.num_node_features,
    continuous_edge_dim=dataset.num_edge_features,
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
for epoch in range(epochs):
    model.train()
    total = 0.0
    for batch in DataLoader(train, batch_size=32, shuffle=True):
        batch = batch.to(device)
        loss = (model(batch).squeeze(-1) + mean.to(device) - batch.y).abs().mean()  # L1, in eV
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * batch.num_graphs
    model.eval()
    with torch.no_grad():
        errors = [(model(b.to(device)).squeeze(-1) + mean.to(device) - b.y).abs() for b in DataLoader(test, 50)]
    print(f"epoch {epoch + 1}: train L1 {total / len(train):.3f} eV, test MAE {torch.cat(errors).mean().item():.3f} eV")
