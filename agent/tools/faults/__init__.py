"""Fault drills on the real local stack (docs/operations.md, "Faults"): a worker killed mid-reply
(`worker_kill`), the caller's network cut mid-reply (`media_loss`). `python -m agent.tools.faults --help`."""
