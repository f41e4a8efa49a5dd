"""Random models in Piper's format, seeded: small DAGs for tests, exercises and examples.

Each layer gets TMPCs for a few tensor-parallel degrees: a "vanilla" one and, on most layers,
an "activation recomp" one that is slower and stores less per micro-batch in flight
(``a`` smaller, ``b`` larger), as in Piper's inputs; times shrink and syncs grow with ``t``.
"""

from __future__ import annotations

import random

from .model import Layer, Model, TMPC


def random_model(seed: int, layers: int = 6, chain: bool = False, degrees: tuple[int, ...] = (1, 2, 4),
                 devices: int = 8, memory: float = 4e9, microbatches: int = 8, bandwidth: float = 1e10,
                 options: int = 2) -> Model:
    """A random layer DAG (a chain when ``chain``) with TMPCs at the given degrees.

    Examples
    --------
    >>> m = random_model(3, layers=5)
    >>> len(m.layers), m.devices
    (5, 8)
    """
    rng = random.Random(seed)
    edges: dict[tuple[int, int], float] = {}
    for v in range(1, layers):
        preds = [v - 1] if chain else rng.sample(range(v), rng.randint(1, min(2, v)))
        for u in preds:
            edges[(u, v)] = float(rng.choice([0, 1e6, 3e7, 2e8]))
    ins = {v: [u for (u, w) in edges if w == v] for v in range(layers)}
    outs = {v: [w for (u, w) in edges if u == v] for v in range(layers)}
    out = []
    for v in range(layers):
        p = rng.uniform(0.001, 0.05)
        w = rng.choice([0.0, 1e7, 2e8])
        a = rng.uniform(1e7, 6e8)
        b = rng.uniform(1e7, 9e8)
        by_t = {}
        for t in degrees:
            if t > 1 and rng.random() < 0.15:
                continue
            fw = {u: (0.0 if t == 1 else rng.choice([0.0, 1e6, 2e7])) for u in ins[v]}
            bw = {x: (0.0 if t == 1 else rng.choice([0.0, 1e6, 2e7])) for x in outs[v]}
            pt = p / t * rng.uniform(1.0, 1.6)
            opts = [TMPC("vanilla", pt, w / t, a / t, b / t, fw, bw)]
            if options > 1 and rng.random() < 0.8:
                opts.append(TMPC("activation recomp", pt * rng.uniform(1.05, 1.6), w / t,
                                 a / t * rng.uniform(0.05, 0.4), b / t * rng.uniform(1.0, 1.5), fw, bw))
            if options > 2 and rng.random() < 0.5:
                opts.append(TMPC("offload", pt * rng.uniform(1.2, 2.0), w / t,
                                 a / t * rng.uniform(0.02, 0.2), b / t * rng.uniform(0.5, 1.0), fw, bw))
            by_t[t] = tuple(opts)
        if 1 not in by_t:
            by_t[1] = (TMPC("vanilla", p, w, a, b, {u: 0.0 for u in ins[v]}, {x: 0.0 for x in outs[v]}),)
        out.append(Layer(v, f"layer{v}", by_t))
    return Model(tuple(out), tuple((u, v, c) for (u, v), c in edges.items()), devices, memory, bandwidth,
                 microbatches)
