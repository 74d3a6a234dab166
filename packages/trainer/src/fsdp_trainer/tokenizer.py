"""Tokenizers: the builtin byte-level one (no files needed) or any Hugging Face tokenizer.

The byte-level tokenizer maps each UTF-8 byte to its own id (0-255) and adds
BOS=256, EOS=257, PAD=258. It is built with the ``tokenizers`` library as a BPE
with no merges over GPT-2's byte-to-unicode alphabet, so it is a real
``PreTrainedTokenizerFast``: it saves with ``save_pretrained`` and reloads with
``AutoTokenizer``, which is what the Hugging Face export relies on.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import ConfigError

BYTES = "bytes"
BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable unicode characters."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars), strict=True))


def byte_tokenizer() -> Any:
    """The builtin byte-level tokenizer as a ``PreTrainedTokenizerFast`` (vocabulary 259)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab.update({BOS: 256, EOS: 257, PAD: 258})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS, PAD])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)


def load_tokenizer(name: str | None) -> Any:
    """``bytes`` -> the builtin tokenizer; a directory or Hub id -> ``AutoTokenizer`` (honours $HF_TOKEN); None -> None."""
    if name is None:
        return None
    if name == BYTES:
        return byte_tokenizer()
    from transformers import AutoTokenizer

    from .storage import is_s3, s3_model_files

    if is_s3(name):
        name = s3_model_files(name, "--model.tokenizer")
    return AutoTokenizer.from_pretrained(name, token=os.environ.get("HF_TOKEN"))


def encode_documents(tokenizer: Any, docs: list[str]) -> list[list[int]]:
    """Token ids of each document, as ``[BOS] + text + [EOS]`` (BOS only when the tokenizer has one)."""
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"] if docs else []
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("--model.tokenizer: the tokenizer has no EOS token; documents could not be separated")
    return [bos + d + [eos] for d in ids]
