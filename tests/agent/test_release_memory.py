"""release_free_memory() trims the C heap where glibc is present (the soak measures what it buys)."""

from __future__ import annotations

import sys

import pytest

from common.process import release_free_memory
from lab.process_probes import rss_parts_mb


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim is Linux-only")
def test_release_free_memory_trims_on_linux_and_rss_parts_are_read() -> None:
    garbage = [bytearray(4096) for _ in range(20_000)]  # ~80 MB of small blocks on the C heap
    del garbage
    assert release_free_memory() is True
    parts = rss_parts_mb()
    assert set(parts) == {"anon", "file"} and parts["anon"] > 0 and parts["file"] > 0
