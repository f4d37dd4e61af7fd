"""Training: the learner, the loop that runs it, scale-out, and the stages around RL.

- :mod:`rlvr.train.learn` — the learner and its update: policy (+ reference, critic) and the
  objective (policy losses from :mod:`rlvr.algo`, SFT, preference, distillation) → one update
  from groups of trajectories.
- :mod:`rlvr.train.loop` — the loop that feeds it: the orchestrator (collect → update → sync),
  the run directory, checkpoints and resume, logs, health checks.
- :mod:`rlvr.train.scale` — torch.distributed (DDP / FSDP2) and Ray placement behind the same loop.
- :mod:`rlvr.train.stages` — what a stage trains on and with which objective (SFT, rejection
  sampling, DPO, distillation, SFT + RL), and pipelines of stages in one run directory.
"""
