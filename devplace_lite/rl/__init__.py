"""Learning to place: a small Placeto (Addanki et al., NeurIPS 2019) that trains on a laptop CPU.

* `devplace_lite.rl.env`: the MDP (numpy only): visit every node once in topological order,
  choose its device, reward = improvement of the simulated run time; node features.
* `devplace_lite.rl.policy`: the graph embedding (forward/backward message passing, pooling over
  ancestors, descendants and parallel nodes) and the policy head (torch).
* `devplace_lite.rl.train`: REINFORCE with a per-step baseline and an entropy bonus, seeded;
  checkpoints; `place` runs a trained policy on a new graph (torch).
* `devplace_lite.rl.compare`: the classical baselines and the exhaustive optimum scored in the
  same simulator, with the number of simulator calls each used (numpy only).

Importing this package does not import torch; `policy` and `train` do.
"""
