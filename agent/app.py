"""The worker as LiveKit's CLI finds it: `server`, the configured `AgentServer` (agent/worker.py builds it).

`python -m agent dev|start` hands this file to LiveKit's own entry point (`python -m livekit.agents start
agent/app.py`, which the LiveKit CLI's `lk agent dev|start` runs too); its discovery imports the module and takes
`server`. Importing it reads the configuration once and runs the checkpoint doctor (exit 2 naming each problem).
"""

from agent.worker import serve

server = serve()
