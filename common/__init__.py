"""Small utilities that the engine, the worker, the servers and the lab share; imports nothing else of ours.

- `env`: `.env` files, typed environment variables and the project's one `ConfigError`.
- `audio_format`: the engine's audio (24 kHz, 80 ms codec frames) and the rate the speech models hear (16 kHz).
- `percentiles`: the one percentile definition, so a P95 means the same thing in every report.
- `jsonbody`: JSON from untrusted clients with a nesting bound of its own (both servers parse bodies with it).
- `niceness`: lowers a compute thread's CPU priority (model compute on a CPU yields to the media path).
- `cpu`: what a process reads of its CPU and memory (/proc, cgroups): the cores it may use, CPU counters, RSS.
- `loop_watch`: the stall watchdog of an event loop, logging each stall with its cause (worker and engine server).
- `worker_defaults`: the worker's defaults that the token server's agent guard relies on too (health port, load
  threshold).
Each module is standard library only, so every command's `--help` stays light.
"""
