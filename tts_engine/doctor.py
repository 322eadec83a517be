"""Checkpoint doctor: the first thing every engine load runs, and `python -m tts_engine check` (doctor_cli.py).

Contract:
- `diagnose(model_dir) -> Diagnosis` reads only configs and safetensors *headers* (through `safetensors.safe_open`,
  which maps the file and reads no tensor data), never a weight. It checks: the directory and every file the loader
  needs; `config.json` / `generation_config.json` (`ModelConfig`); the tokenizer files; every tensor of
  `model.safetensors` against the shapes our module tree (built on the meta device) expects for that config; the same
  for `speech_tokenizer/` (`CodecConfig`, `decoder_tensor_shapes`); and files whose header promises more (or fewer)
  bytes than the file holds (a truncated download).
- Each problem is one line naming the file and the tensor or config key. Missing and unexpected tensors of one file
  are listed together in one problem (a renamed tensor shows as both). When wrong shapes are explained by one config
  value (every tensor fits if that key had another value), the problem names that key, its value and the value the
  tensors fit, instead of blaming the tensors. Tensors outside the prefixes we load (`speaker_encoder.*` of a Base
  model, the codec's `encoder.*`) are ignored; unexpected tensors inside them (`talker.*`, `decoder.*`) are problems
  (the official module tree saves exactly the tensors ours expects: tests/parity/official_ref.py loads it).
- `verify(model_dir)` raises `CheckpointError` whose one-line message joins all problems with " | ".
  `tts_engine.model.loader.load_model` calls it before it reads a weight, so `Engine.load` (serve, simulate, the agent
  worker), `synthesize` and the benches all run it; `agent.preflight.check_weights` reports `diagnose`'s problems.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from tts_engine.errors import CheckpointError
from tts_engine.model.codec_config import CodecConfig, decoder_tensor_shapes
from tts_engine.model.config import ModelConfig
from tts_engine.model.layout import CODEC_DIR, CONFIG_FILE, GENERATION_CONFIG_FILE, TOKENIZER_FILES, WEIGHTS_FILE
from tts_engine.model.talker import TTSWeights

Shapes = dict[str, tuple[int, ...]]

TALKER_PREFIX, CODEC_PREFIX = "talker.", "decoder."
_STACK_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "vocab_size")
ConfigKey = tuple[str, ...]  # a path of keys into config.json
TALKER_KEYS: list[ConfigKey] = [
    ("talker_config", k) for k in (*_STACK_KEYS, "text_vocab_size", "text_hidden_size", "num_code_groups")
]
TALKER_KEYS += [("talker_config", "code_predictor_config", k) for k in _STACK_KEYS]
CODEC_KEYS: list[ConfigKey] = [("decoder_config", k) for k in ("codebook_size", "codebook_dim", "latent_dim",
                                                               "hidden_size", "num_attention_heads",
                                                               "num_key_value_heads", "head_dim", "intermediate_size",
                                                               "num_hidden_layers", "num_quantizers", "decoder_dim")]
_COUNT_KEYS = ("num_hidden_layers", "num_code_groups", "num_quantizers")
_LIST = 4  # names shown per list in one message


@dataclass
class Diagnosis:
    model_dir: Path
    problems: list[str] = field(default_factory=list)
    tensors: dict[str, int] = field(default_factory=dict)  # file -> tensors checked

    @property
    def ok(self) -> bool:
        return not self.problems


def diagnose(model_dir: str | Path) -> Diagnosis:
    root = Path(model_dir)
    diag = Diagnosis(root)
    if not root.is_dir():
        diag.problems.append(f"{root}: model directory does not exist")
        return diag
    _check_talker(root, diag)
    for name in TOKENIZER_FILES:
        if not (root / name).is_file():
            diag.problems.append(f"{root / name}: required tokenizer file is missing")
    _check_codec(root / CODEC_DIR, diag)
    diag.problems = [" ".join(p.split()) for p in diag.problems]  # one line each, whatever an exception said
    return diag


def verify(model_dir: str | Path) -> Diagnosis:
    diag = diagnose(model_dir)
    if diag.problems:
        raise CheckpointError(" | ".join(diag.problems))
    return diag


# ---- talker: config.json + model.safetensors ------------------------------------------------------------------
def _check_talker(root: Path, diag: Diagnosis) -> None:
    config_ok = True
    try:
        ModelConfig.from_dir(root)
    except CheckpointError as exc:
        diag.problems.append(str(exc))
        config_ok = False
    except Exception as exc:  # noqa: BLE001 - a value of a type/range the parser did not foresee
        diag.problems.append(f"{root / 'config.json'}: not a usable config ({type(exc).__name__}: {exc})")
        config_ok = False
    path = root / WEIGHTS_FILE
    present = _header_shapes(path, diag)
    if present is None or not config_ok:
        return
    config = json.loads((root / CONFIG_FILE).read_text(encoding="utf-8"))
    gen = json.loads((root / GENERATION_CONFIG_FILE).read_text(encoding="utf-8"))
    present = {k: v for k, v in present.items() if k.startswith(TALKER_PREFIX)}
    diag.tensors[str(path)] = len(present)
    _compare(path, root / CONFIG_FILE, present, config, lambda c: _talker_shapes(c, gen), TALKER_KEYS, diag)


def _talker_shapes(config: dict[str, Any], gen: dict[str, Any]) -> Shapes:
    cfg = ModelConfig.from_dicts(config, gen)
    with torch.device("meta"):
        return {name: tuple(t.shape) for name, t in TTSWeights(cfg).state_dict().items()}


# ---- speech tokenizer --------------------------------------------------------------------------------------------
def _check_codec(folder: Path, diag: Diagnosis) -> None:
    config_path = folder / CONFIG_FILE
    if not folder.is_dir():
        diag.problems.append(f"{folder}: required speech tokenizer folder is missing")
        return
    if not config_path.is_file():
        diag.problems.append(f"{config_path}: required file is missing")
        return
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("expected a JSON object at the top level")
        CodecConfig.from_json(config, source=str(config_path))
    except CheckpointError as exc:
        diag.problems.append(str(exc))
        return
    except (OSError, json.JSONDecodeError) as exc:
        diag.problems.append(f"{config_path}: not valid JSON ({exc})")
        return
    except Exception as exc:  # noqa: BLE001 - a value of a type/range the parser did not foresee
        diag.problems.append(f"{config_path}: not a usable config ({type(exc).__name__}: {exc})")
        return
    path = folder / WEIGHTS_FILE
    present = _header_shapes(path, diag)
    if present is None:
        return
    present = {k: v for k, v in present.items() if k.startswith(CODEC_PREFIX)}
    diag.tensors[str(path)] = len(present)

    def build(c: dict[str, Any]) -> Shapes:
        return decoder_tensor_shapes(CodecConfig.from_json(c, source=str(config_path)))

    _compare(path, config_path, present, config, build, CODEC_KEYS, diag)


# ---- shared ------------------------------------------------------------------------------------------------------
def _header_shapes(path: Path, diag: Diagnosis) -> Shapes | None:
    """Tensor name -> shape from the safetensors header (no tensor data is read); None after a problem."""
    if not path.is_file():
        diag.problems.append(f"{path}: required weights file is missing")
        return None
    try:
        with safe_open(str(path), framework="numpy") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except Exception as exc:  # noqa: BLE001 - any unreadable header is this file's problem
        diag.problems.append(_size_problem(path) or f"{path}: not a readable safetensors file ({exc})")
        return None


def _size_problem(path: Path) -> str | None:
    """Why safe_open refused a file, when it is its size: the library says only 'incomplete metadata'."""
    have = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{path}: truncated: {have} bytes, not even a safetensors header"
        header_len = int.from_bytes(head, "little")
        if header_len > have - 8:
            claim = f"its header claims {header_len} bytes, the file has {have}"
            return f"{path}: not a safetensors file, or truncated: {claim}"
        try:
            header = json.loads(fh.read(header_len))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError):
            return None
    need = 8 + header_len + end
    if need > have:
        return f"{path}: truncated: its header describes {need} bytes, the file has {have} (download it again)"
    if need < have:
        return f"{path}: {have} bytes, {have - need} more than its header describes (a damaged file)"
    return None


def _compare(path: Path, config_path: Path, present: Shapes, config: dict[str, Any],
             build: Callable[[dict[str, Any]], Shapes], keys: list[ConfigKey], diag: Diagnosis) -> None:
    for key in keys:
        value = _lookup(config, key)
        integral = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
        if value is not None and not (integral and value >= 1):  # 1024.0 parses as 1024, as in the loaders
            diag.problems.append(f"{config_path}: {'.'.join(key)} = {value!r} is not allowed; give a positive integer")
            return
    try:
        expected = build(config)
    except Exception as exc:  # noqa: BLE001 - e.g. a head count that does not divide the width
        diag.problems.append(f"{config_path}: no module tree can be built from it ({type(exc).__name__}: {exc})")
        return
    missing, unexpected, wrong = _differences(expected, present)
    if not (missing or unexpected or wrong):
        return
    blame = _blame_config_key(config, present, expected, wrong, build, keys)
    if blame:
        diag.problems.append(f"{config_path}: {blame} (tensor shapes read from {path})")
        return
    if wrong:
        items = [f"{n} has shape {_fmt(a)}, expected {_fmt(e)}" for n, (a, e) in sorted(wrong.items())]
        what = "tensor" if len(items) == 1 else f"{len(items)} tensors:"
        diag.problems.append(f"{path}: {what} {_cut(items)}")
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} tensor(s) missing: " + _cut([f"{n} (expected {_fmt(s)})"
                                                                        for n, s in sorted(missing.items())]))
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected: " + _cut([f"{n} {_fmt(s)}"
                                                                   for n, s in sorted(unexpected.items())]))
        hint = " (renamed?)" if missing and unexpected else ""
        diag.problems.append(f"{path}: " + "; ".join(parts) + hint)


def _differences(expected: Shapes, present: Shapes) -> tuple[Shapes, Shapes, dict[str, tuple[tuple, tuple]]]:
    missing = {n: s for n, s in expected.items() if n not in present}
    unexpected = {n: s for n, s in present.items() if n not in expected}
    wrong = {n: (present[n], s) for n, s in expected.items() if n in present and present[n] != s}
    return missing, unexpected, wrong


def _blame_config_key(config: dict[str, Any], present: Shapes, expected: Shapes, wrong: dict[str, tuple[tuple, tuple]],
                      build: Callable[[dict[str, Any]], Shapes], keys: list[tuple[str, ...]]) -> str | None:
    """'<key> = <value> disagrees ...' when changing that one config value makes every tensor fit, else None."""
    pairs = {(e, a) for actual, exp in wrong.values() if len(actual) == len(exp)
             for a, e in zip(actual, exp, strict=True) if a != e}
    counts = _index_counts(present)
    for key in keys:
        parent = _lookup(config, key[:-1])
        if not isinstance(parent, dict) or not isinstance(parent.get(key[-1]), int):
            continue
        current = parent[key[-1]]
        # the value that scales each differing dimension back, and for count keys the counts seen in the file
        candidates = {current * a // e for e, a in pairs if e and (current * a) % e == 0}
        if key[-1] in _COUNT_KEYS:
            candidates |= counts
        for value in sorted(candidates - {current}):
            trial = copy.deepcopy(config)
            _lookup(trial, key[:-1])[key[-1]] = value
            try:
                fits = build(trial) == present
            except Exception:  # noqa: BLE001 - a candidate the config parser refuses simply does not fit
                fits = False
            if fits:
                name = ".".join(key)
                example = next(iter(sorted(wrong)), None)
                seen = ""
                if example:
                    seen = f"; e.g. {example} is {_fmt(wrong[example][0])}, not {_fmt(wrong[example][1])}"
                return f"{name} = {current!r} disagrees with the tensors, which fit {name} = {value}{seen}"
    return None


def _index_counts(present: Shapes) -> set[int]:
    """Counts of numbered children (layers, code groups) seen in the file: candidates for count keys."""
    seen: dict[str, set[int]] = {}
    for name in present:
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part.isdigit():
                seen.setdefault(".".join(parts[:i]), set()).add(int(part))
    return {max(v) + 1 for v in seen.values()}


def _lookup(config: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = config
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _cut(items: list[str]) -> str:
    return ", ".join(items[:_LIST]) + (f" and {len(items) - _LIST} more" if len(items) > _LIST else "")
