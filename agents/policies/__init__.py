"""Policies: what chooses NCCL's algorithm, protocol and channels for a call."""
