"""Read a safetensors file against the tensor names and shapes a module tree expects.

Shared by the talker loader and the codec loader: every expected tensor must be present with its exact
shape (checked from the header before any tensor is read), otherwise `CheckpointError` names the file,
the tensor and both shapes. Extra tensors (e.g. the unused Mimi encoder) are ignored. Tensors named in
`host` stay in CPU memory (in `dtype`) whatever `device` is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from tts_engine.errors import CheckpointError


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def read_checked_tensors(
    path: Path, expected: Mapping[str, tuple[int, ...]], device: torch.device | str, dtype: torch.dtype,
    host: Collection[str] = (),
) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            present = set(f.keys())
            for name, shape in expected.items():
                if name not in present:
                    raise CheckpointError(f"{path}: tensor {name} missing (expected shape {_fmt(shape)})")
                actual = tuple(f.get_slice(name).get_shape())
                if actual != tuple(shape):
                    raise CheckpointError(f"{path}: tensor {name} has shape {_fmt(actual)}, expected {_fmt(shape)}")
            return {name: f.get_tensor(name).to(device="cpu" if name in host else device, dtype=dtype)
                    for name in expected}
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: named in the CheckpointError
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None
