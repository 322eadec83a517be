"""Browser test fixtures: the real token server on an ephemeral port (in a thread) and Debian Chromium driven
by Playwright through its executable path (no browser download). LiveKit is pointed at a closed local port,
so joining reaches the real livekit-client connection code and fails the way an unreachable server does."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from token_server.app import create_app
from token_server.config import ServerConfig

BROWSER_FLAGS = [
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",  # a synthetic microphone (beeps)
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",  # CI containers run as root
]
API_SECRET = "browser-test-secret-" + "q" * 24


def chromium_path() -> str:
    for candidate in (os.environ.get("CHROMIUM_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("Chromium not found: install Debian `chromium` (scripts/setup.sh does) or set CHROMIUM_PATH")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    config: ServerConfig
    base_url: str


class ServerThread:
    def __init__(self, config: ServerConfig, port: int = 0) -> None:
        """`port` 0: any free one (read `port` after `start`); a given port lets a test restart a server there."""
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(create_app(config))
        self.port = port
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="token-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("token server thread did not start")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    config = ServerConfig.from_env(
        {
            "LIVEKIT_URL": f"ws://127.0.0.1:{closed_port()}",
            "LIVEKIT_API_KEY": "browserkey",
            "LIVEKIT_API_SECRET": API_SECRET,
            "VAD_SILENCE_MS": "250",
        }
    )
    if not (config.web_dir / "node_modules/livekit-client/dist/livekit-client.umd.js").is_file():
        pytest.fail("web/node_modules is missing: run scripts/setup.sh (npm ci in web/)")
    server = ServerThread(config)
    server.start()
    yield LiveServer(config=config, base_url=f"http://127.0.0.1:{server.port}")
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=BROWSER_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server: LiveServer) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["microphone"], origin=live_server.base_url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    page.on("requestfailed", lambda req: problems.append(f"requestfailed: {req.url} {req.failure}"))
    page.problems = problems
    yield page
    context.close()
