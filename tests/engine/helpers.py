"""Small helpers shared by the engine tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np


async def collect(handle: Any) -> tuple[np.ndarray, list[Any]]:
    packets = [packet async for packet in handle]
    pcm = np.concatenate([p.pcm for p in packets]) if packets else np.zeros(0, dtype=np.int16)
    return pcm, packets


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)
