"""Code dumps: the codec codes of a finished stream saved to disk, so the decoder can be replayed offline.

Format: one `<request_id>.npz` per stream with `codes` ([T, 16] int64, the valid frames only) and
`meta` (a JSON string: text, speaker, language, seed, end reason, frames, sample rate). Written by a
small background thread so file I/O never delays the GPU worker. `load_code_dump` reads one back.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def write_code_dump(path: Path, codes: np.ndarray, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, codes=codes.astype(np.int64), meta=np.array(json.dumps(meta, ensure_ascii=False)))
    tmp.replace(path)


def load_code_dump(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Returns (codes [T, 16] int64, meta dict). Raises ValueError naming the file when it is not a dump."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"code dump {p} does not exist")
    try:
        with np.load(p, allow_pickle=False) as data:
            codes = np.asarray(data["codes"], dtype=np.int64)
            meta = json.loads(str(data["meta"])) if "meta" in data else {}
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"{p} is not a code dump (.npz with 'codes' [T,16]): {exc}") from None
    if codes.ndim != 2 or codes.shape[1] != 16:
        raise ValueError(f"{p}: codes have shape {codes.shape}; expected [T, 16]")
    return codes, meta


class CodeDumper:
    """Writes dumps in the background; `flush()` waits for the ones queued so far (tests, regression)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-code-dump")
        self._futures: list[concurrent.futures.Future[None]] = []

    def path_for(self, request_id: str) -> Path:
        return self.directory / f"{_SAFE_NAME.sub('_', request_id)}.npz"

    def submit(self, request_id: str, codes: list[np.ndarray], meta: dict[str, Any]) -> Path:
        path = self.path_for(request_id)
        array = np.stack(codes) if codes else np.zeros((0, 16), dtype=np.int64)
        future = self._pool.submit(self._write, path, array, meta)
        self._futures = [f for f in self._futures if not f.done()] + [future]
        return path

    @staticmethod
    def _write(path: Path, codes: np.ndarray, meta: dict[str, Any]) -> None:
        try:
            write_code_dump(path, codes, meta)
        except OSError:
            log.exception("could not write code dump %s", path)

    def flush(self, timeout: float = 30.0) -> None:
        concurrent.futures.wait(list(self._futures), timeout=timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
