"""Placeto's policy: a graph embedding by message passing, pooled around the current node.

Embedding (Addanki et al., 2019, section 3.2), for node features ``x_v``:

* ``z_v = relu(W x_v)``;
* forward sweep in topological order, ``h_v = z_v + g(sum_{u in pred(v)} f(h_u))``, so that
  ``h_v`` summarises everything upstream of ``v``;
* the mirror sweep over successors, ``h'_v = z_v + g'(sum_{w in succ(v)} f'(h'_w))``;
* the node embedding is ``[h_v, h'_v]``.

The sweeps run level by level (all nodes of one longest-path depth at once), so a graph of
depth ``L`` costs ``2 L`` small batched matrix products instead of ``2 n`` tiny ones.

Head: for the current node (or colocation class) ``c``, mean-pool the embeddings of its
ancestors, of its descendants and of the nodes parallel to it (neither), and concatenate with
the embedding of ``c``. Placeto maps that vector to one logit per device by a perceptron
(``device_head=False``). The default head instead scores every device ``d`` with one shared
perceptron that also sees the means over the parents, ancestors, parallel nodes and descendants
of ``c`` that sit *on* ``d``: what is busy on ``d`` is read directly, and the head treats all
devices alike (chapter 07 and benchmarks/rl/README.md measure the difference). Devices where
the node may not run get ``-inf``.

Ablation (``message_passing=False``): ``h_v = h'_v = z_v``, no sweeps; pooling is kept, so the
only thing removed is what one node learns of the others' features through the graph.

Example
-------
>>> import torch
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.rl.env import PlacementEnv, feature_count
>>> env = PlacementEnv(layered(8, seed=0), Cluster(accelerators=2)); _ = env.reset()
>>> net = Placer(feature_count(2), 2, hidden=8)
>>> gt = GraphTensors.build(env)
>>> logits = net(torch.from_numpy(env.features())[None], gt, torch.tensor([0]))
>>> tuple(logits.shape)
(1, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .env import PlacementEnv


def _levels(n: int, adj: list[list[int]], order: np.ndarray) -> list[torch.Tensor]:
    """Index tensors of nodes by longest-path depth (sources = 0), depth 0 left out."""
    depth = np.zeros(n, dtype=np.int64)
    for v in order.tolist():
        for w in adj[v]:
            depth[w] = max(depth[w], depth[v] + 1)
    return [torch.from_numpy(np.flatnonzero(depth == L)) for L in range(1, int(depth.max(initial=0)) + 1)]


@dataclass
class GraphTensors:
    """What the policy needs of one graph, built once: adjacency, sweep levels, pooling masks."""

    adj: torch.Tensor          # (n, n), adj[u, w] = 1 for an edge u -> w
    up_levels: list[torch.Tensor]
    down_levels: list[torch.Tensor]
    pools: torch.Tensor        # (T, 4, n): mean-pooling weights of self, ancestors, descendants, parallel
    sets: torch.Tensor         # (T, 4, n): 0/1 masks of parents, ancestors, parallel nodes, descendants
    allowed: torch.Tensor      # (T, D) bool

    @classmethod
    def build(cls, env: PlacementEnv) -> "GraphTensors":
        g = env.graph
        n = g.n
        A = np.zeros((n, n), dtype=np.float32)
        A[g.src, g.dst] = 1.0
        order = g.topological_order()
        reach = np.zeros((n, n), dtype=bool)  # reach[u, w]: a path u -> ... -> w
        for v in order[::-1].tolist():
            for w in g.succ[v]:
                reach[v, w] = True
                reach[v] |= reach[w]
        T = env.steps
        pools = np.zeros((T, 4, n), dtype=np.float32)
        sets = np.zeros((T, 4, n), dtype=np.float32)
        for t, nodes in enumerate(env.unit_nodes):
            inside = np.zeros(n, dtype=bool)
            inside[nodes] = True
            anc = reach[:, nodes].any(axis=1) & ~inside
            desc = reach[nodes, :].any(axis=0) & ~inside
            par = ~(anc | desc | inside)
            parents = (A[:, nodes].sum(axis=1) > 0) & ~inside
            for j, m in enumerate((inside, anc, desc, par)):
                if m.any():
                    pools[t, j, m] = 1.0 / m.sum()
            for j, m in enumerate((parents, anc, par, desc)):
                sets[t, j, m] = 1.0
        return cls(adj=torch.from_numpy(A),
                   up_levels=_levels(n, g.succ, order),
                   down_levels=_levels(n, g.pred, order[::-1]),
                   pools=torch.from_numpy(pools), sets=torch.from_numpy(sets),
                   allowed=torch.from_numpy(env.allowed.copy()))


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


class Placer(nn.Module):
    """Node embedding + pooling + device logits (see the module docstring)."""

    def __init__(self, features: int, devices: int, hidden: int = 32, message_passing: bool = True,
                 device_head: bool = True):
        super().__init__()
        self.device_head = device_head
        self.features, self.devices, self.hidden = features, devices, hidden
        self.message_passing = message_passing
        self.embed = nn.Linear(features, hidden)
        if message_passing:
            self.f_up, self.g_up = _mlp(hidden, hidden, hidden), _mlp(hidden, hidden, hidden)
            self.f_down, self.g_down = _mlp(hidden, hidden, hidden), _mlp(hidden, hidden, hidden)
        if device_head:
            self.head = _mlp(8 * 2 * hidden, hidden, 1)
        else:
            self.head = _mlp(4 * 2 * hidden, hidden, devices)

    def _sweep(self, z: torch.Tensor, adj: torch.Tensor, levels: list[torch.Tensor], f: nn.Module,
               g: nn.Module) -> torch.Tensor:
        h = z
        out = f(z)  # f(h_u), final for the sources now and for each level once it is done
        for idx in levels:
            # messages into this level come from lower levels only, whose f(h) is final
            new = z[:, idx] + g(torch.matmul(adj[:, idx].T, out))  # (B, |idx|, H)
            h = h.index_copy(1, idx, new)
            out = out.index_copy(1, idx, f(new))
        return h

    def embeddings(self, X: torch.Tensor, gt: GraphTensors) -> torch.Tensor:
        """(B, n, F) features -> (B, n, 2H) node embeddings."""
        z = torch.relu(self.embed(X))
        if not self.message_passing:
            return torch.cat([z, z], dim=-1)
        up = self._sweep(z, gt.adj, gt.up_levels, self.f_up, self.g_up)
        down = self._sweep(z, gt.adj.T, gt.down_levels, self.f_down, self.g_down)
        return torch.cat([up, down], dim=-1)

    def forward(self, X: torch.Tensor, gt: GraphTensors, steps: torch.Tensor) -> torch.Tensor:
        """Logits (B, D) for the units ``steps`` (B,) given features X (B, n, F)."""
        H = self.embeddings(X, gt)
        pooled = torch.bmm(gt.pools[steps], H)  # (B, 4, 2H)
        if self.device_head:
            onehot = X[:, :, -self.devices:]  # (B, n, D)
            w = gt.sets[steps][:, :, :, None] * onehot[:, None]  # (B, 4, n, D)
            w = w / w.sum(dim=2, keepdim=True).clamp(min=1.0)
            per_dev = torch.einsum("bjnd,bne->bdje", w, H).flatten(2)  # (B, D, 4 * 2H)
            ctx = pooled.flatten(1)[:, None, :].expand(-1, self.devices, -1)
            logits = self.head(torch.cat([ctx, per_dev], dim=2)).squeeze(2)
        else:
            logits = self.head(pooled.flatten(1))
        return logits.masked_fill(~gt.allowed[steps], float("-inf"))
