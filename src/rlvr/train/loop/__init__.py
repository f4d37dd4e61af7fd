"""The loop: orchestrator, run directory, checkpoints, resume, logs and health checks."""
