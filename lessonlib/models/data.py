"""Corpora and tokenizer: everything the models learn from ships with Python itself.

Two corpora, built from the running interpreter so nothing is ever downloaded:

* ``code``  -- the standard library's ``.py`` files (no ``site-packages``, no ``test``/``tests``
  folders), in sorted path order.
* ``prose`` -- English from the standard library's docstrings (read with ``ast``, nothing is
  imported) and the help topics in ``pydoc_data.topics``.

Each document has a stable name (its path relative to the standard library, or
``topic:NAME``). A document is held out when ``sha256(name)`` mod 100 < ``HELDOUT_PERCENT``;
the split therefore never depends on file order or on the Python version, and the held-out
names are written next to every checkpoint.

Tokens are GPT-2-style byte-level BPE with a 2,048-entry vocabulary, trained on the train
split and shipped as ``assets/tokenizer.json``; any text round-trips exactly.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import io
import os
import pathlib
import sysconfig

import numpy as np

from lessonlib import paths
from lessonlib.jsonio import write_atomic

ASSETS = paths.ASSETS
TOKENIZER_PATH = ASSETS / "tokenizer.json"
VOCAB_SIZE = 2048
HELDOUT_PERCENT = 4
CORPORA = ("code", "prose")
CACHE_DIR = pathlib.Path(os.environ.get("LESSONLIB_CACHE", paths.ROOT / ".cache"))


def stdlib_root() -> pathlib.Path:
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def _code_files() -> list[pathlib.Path]:
    root = stdlib_root()
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if "site-packages" in parts or {"test", "tests"} & set(parts):
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _read_source(path: pathlib.Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # a handful of legacy files are not UTF-8; they are simply skipped


def _docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of one source file, in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    docs = [ast.get_docstring(n, clean=True) for n in nodes]
    return [d for d in docs if d and len(d) >= 40]


@functools.cache
def documents(corpus: str) -> tuple[tuple[str, str], ...]:
    """All ``(name, text)`` documents of a corpus, in a fixed order."""
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")
    root = stdlib_root()
    docs = []
    if corpus == "code":
        for path in _code_files():
            text = _read_source(path)
            if text and text.strip():
                docs.append((path.relative_to(root).as_posix(), text))
    else:
        for path in _code_files():
            text = _read_source(path)
            strings = _docstrings(text) if text else []
            if strings:
                docs.append((path.relative_to(root).as_posix(), "\n\n".join(strings)))
        from pydoc_data.topics import topics

        docs += [(f"topic:{key}", topics[key]) for key in sorted(topics)]
    return tuple(docs)


def is_heldout(name: str) -> bool:
    """Deterministic split: about HELDOUT_PERCENT % of documents, chosen by a hash of the name."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


def split_documents(corpus: str, split: str) -> list[tuple[str, str]]:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    want = split == "heldout"
    return [(n, t) for n, t in documents(corpus) if is_heldout(n) == want]


def heldout_names() -> dict[str, list[str]]:
    return {c: [n for n, _ in split_documents(c, "heldout")] for c in CORPORA}


def text(corpus: str, split: str) -> str:
    """The split of a corpus as one string, documents separated by a blank line."""
    return "\n\n".join(t for _, t in split_documents(corpus, split))


# ----------------------------------------------------------------------------- tokenizer

def train_tokenizer(path: pathlib.Path = TOKENIZER_PATH, vocab_size: int = VOCAB_SIZE) -> None:
    """Train the byte-level BPE on the train split of both corpora and save it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator((t for c in CORPORA for _, t in split_documents(c, "train")), trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # atomic: a reader sees the old file or the new
    try:
        tok.save(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@functools.lru_cache(maxsize=1)
def tokenizer():
    from tokenizers import Tokenizer

    if not TOKENIZER_PATH.exists():
        raise FileNotFoundError(
            f"{TOKENIZER_PATH} is missing; rebuild it with: python -m lessonlib.models.train tokenizer"
        )
    return Tokenizer.from_file(str(TOKENIZER_PATH))


def to_tokens(text: str) -> list[int]:
    """Text -> BPE token ids (exact round trip with ``to_text``)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return tokenizer().encode(text).ids


def to_text(tokens) -> str:
    return tokenizer().decode([int(t) for t in tokens], skip_special_tokens=False)


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the vocabulary writes byte b as itself when it is
    a printable Latin-1 character, otherwise as chr(256 + n) for the n-th byte that is not."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    others = iter(range(256, 512))
    return {chr(b if b in printable else next(others)): b for b in range(256)}


@functools.lru_cache(maxsize=1)
def token_bytes() -> tuple[bytes, ...]:
    """The exact bytes each token id stands for (for drawing tokens). Read from the vocabulary,
    not by decoding one token: a token may hold part of a multi-byte UTF-8 character."""
    tok, byte_of = tokenizer(), _byte_of_char()
    return tuple(bytes(byte_of[c] for c in tok.id_to_token(i)) for i in range(tok.get_vocab_size()))


def token_array(corpus: str, split: str) -> np.ndarray:
    """The whole split tokenised as one uint16 array, cached on disk after the first call."""
    digest = hashlib.sha256(TOKENIZER_PATH.read_bytes()).hexdigest()[:12]
    cache = CACHE_DIR / f"tokens-{corpus}-{split}-{digest}.npy"
    if cache.exists():
        try:
            return np.load(cache)
        except (ValueError, OSError, EOFError):  # a damaged cache is derived data: tokenise again below
            pass
    ids = tokenizer().encode_batch([t + "\n\n" for _, t in split_documents(corpus, split)])
    arr = np.fromiter((i for e in ids for i in e.ids), dtype=np.uint16)
    buffer = io.BytesIO()
    np.save(buffer, arr)
    write_atomic(cache, buffer.getvalue())
    return arr


def bytes_per_token(corpus: str, split: str = "heldout") -> float:
    return len(text(corpus, split).encode()) / len(to_tokens(text(corpus, split)))


def heldout_prompts(corpus: str, n: int, length: int, margin: int | None = None) -> list[list[int]]:
    """``n`` prompts of ``length`` held-out tokens from evenly spaced offsets: the one prompt
    slicer of the benchmarks and notebooks. ``margin`` tokens after the last prompt stay
    unused (default ``3 * length``: room for the continuation a benchmark generates)."""
    tokens = token_array(corpus, "heldout")
    margin = 3 * length if margin is None else margin
    if n < 1 or length < 1 or len(tokens) < length + margin:
        raise ValueError(f"cannot cut n={n} prompts of length={length} (+ margin {margin}) "
                         f"from {len(tokens)} held-out tokens")
    starts = np.linspace(0, len(tokens) - length - margin, n).astype(int)
    return [tokens[s : s + length].astype(int).tolist() for s in starts]

