"""`python -m agent <command>`: preflight (what is missing to run the stack)."""

from __future__ import annotations

import sys

from tts_engine.env import load_dotenv
from tts_engine.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    load_dotenv()
    if argv[:1] == ["preflight"]:
        from agent.config import AgentConfig
        from agent.preflight import report, run_checks
        from tts_engine.config import EngineConfig

        try:
            agent_cfg, engine_cfg = AgentConfig.from_env(), EngineConfig.from_env()
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
        print("preflight:")
        return 0 if report(run_checks(agent_cfg, engine_cfg)) else 1
    print("usage: python -m agent preflight", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
