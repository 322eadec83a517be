"""The checkpoint's layout on disk, defined once: the Hugging Face file names of a Qwen3-TTS 12 Hz CustomVoice model.

- A model folder holds `CONFIG_FILE`, `GENERATION_CONFIG_FILE`, `WEIGHTS_FILE`, the tokenizer's `TOKENIZER_FILES`,
  `PREPROCESSOR_FILE`, ModelScope's `MODELSCOPE_FILE` and the codec in `CODEC_DIR`, which has its own
  `CONFIG_FILE`, `WEIGHTS_FILE`, `PREPROCESSOR_FILE` and `MODELSCOPE_FILE`.
- `PRESETS`: the shapes `make-checkpoint` can write (tiny for CPU tests, the two real model sizes).
Standard library only: the loader, the doctor, the factory and the `make-checkpoint` command line all read it.
"""

from __future__ import annotations

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"
PREPROCESSOR_FILE = "preprocessor_config.json"
MODELSCOPE_FILE = "configuration.json"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
CODEC_DIR = "speech_tokenizer"

PRESETS = ("tiny", "0.6b", "1.7b")
#: what ModelScope's `configuration.json` says in the released checkpoints (the talker's and the codec's alike)
MODELSCOPE_CONFIG = {"framework": "pytorch", "task": "text-to-speech", "allow_remote": True}
