"""`python -m token_server [--host H] [--port P] [--dev] [--env-file F]`: run the token + page server.

Exit codes: 0 after a clean stop, 2 when the configuration is missing or invalid (a one-line message on
stderr, no traceback). `--dev` signs with the `livekit-server --dev` key pair and says so loudly. `--help` needs
only the standard library: the server (aiohttp, livekit-api) is imported once the arguments are parsed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from token_server.config import ConfigError, ServerConfig, load_dotenv

log = logging.getLogger("token_server")

DEV_WARNING = """
################################################################################
#  DEV MODE: tokens are signed with the public `livekit-server --dev` key pair #
#  (devkey). Anyone can mint tokens for such a server. Never use this for a    #
#  server reachable by others; set LIVEKIT_API_KEY / LIVEKIT_API_SECRET.       #
################################################################################"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m token_server", description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="bind address (default: TOKEN_SERVER_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port, 0 = any free one (default: TOKEN_SERVER_PORT or 3000)")
    parser.add_argument("--dev", action="store_true", help="use the livekit-server --dev key pair (devkey/secret)")
    parser.add_argument(
        "--env-file",
        default=os.environ.get("ENV_FILE") or ".env",
        help="read variables from this file first (default: $ENV_FILE or .env)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # heavy (aiohttp, livekit-api): imported after the arguments are parsed, so --help works without them
    from aiohttp import web

    from token_server.agent_guard import GuardConfig
    from token_server.app import create_app
    from token_server.static import vendor_installed

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        load_dotenv(args.env_file)
        config = ServerConfig.from_env(dev=args.dev, host=args.host, port=args.port)
        guard = GuardConfig.from_env()
    except ConfigError as exc:
        print(f"token_server: configuration error: {exc}", file=sys.stderr)
        return 2
    if config.dev:
        log.warning(DEV_WARNING)
    if not vendor_installed(config.web_dir):
        log.warning("livekit-client is not installed in %s/node_modules: run scripts/setup.sh", config.web_dir)
    log.info(
        "serving %s on http://%s:%d (LiveKit %s, agent %r, token TTL %ds, %d tokens/min per client, origins %s)",
        config.web_dir,
        config.host,
        config.port,
        config.livekit_url,
        config.agent_name,
        config.token_ttl_s,
        config.rate_limit_per_min,
        ", ".join(config.allowed_origins) or "same-origin only",
    )
    try:
        web.run_app(create_app(config, guard=guard), host=config.host, port=config.port, print=_print_listening)
    except OSError as exc:
        print(f"token_server: cannot listen on {config.host}:{config.port}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


def _print_listening(message: str) -> None:
    # aiohttp prints "======== Running on http://HOST:PORT ========"; tests read the real port from it
    print(message, flush=True)


if __name__ == "__main__":
    sys.exit(main())
