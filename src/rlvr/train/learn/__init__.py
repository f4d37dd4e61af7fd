"""The learner and its update: batches, log-probs, advantages, losses, critic, optimizer."""
