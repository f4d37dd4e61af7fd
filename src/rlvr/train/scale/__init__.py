"""Scale-out behind the same loop: torch.distributed (DDP, FSDP2) and Ray placement."""
