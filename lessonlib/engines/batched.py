"""B sequences at once, each at its own length: the KV cache and the forward batched serving needs.

A batch of decoding sequences never stays aligned: each accepts its own number of drafts per
round, and prompts differ in length. So the cache keeps one length per row, and a forward feeds
row b its own ``counts[b]`` new tokens (right-padded to the longest, T) at positions
``lengths[b] + t``. The mask that implies: query t of row b sees key j iff j <= lengths[b] + t.
Padding tokens are computed and thrown away: their keys land past the row's new length, where
the next forward overwrites them and no query of that row can see them in between.

* ``BatchCache`` -- keys/values (n_layer, 2, B, H, capacity + pad, D), ``lengths`` (B,) int64;
  ``truncate`` (per-row rollback), ``select`` (finished rows leave the batch), ``row`` (one row
  as a batch-1 ``KVCache``, for the tests against a fresh prefill).
* ``batched_forward(model, cache, tokens, counts)`` -- logits of every new token (B, T, V), or of
  each row's last real one (B, V). It runs ``FastGPT``'s gathered weights (``engines.fast``: one
  ``addmm`` per product) with a batch axis; one row is handed to ``FastGPT``'s batch-1 path on a
  view of the row, so at B = 1 generality costs only the loop's bookkeeping (``bench batch``
  measures it; the per-row path of the general case cost about 10 % more per one-token step).

Shapes: B rows, T new tokens per row (padded), C = n_embd, H = n_head, D = C // H, V = vocab.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from lessonlib.core.validate import check_int
from lessonlib.engines.fast import FastGPT
from lessonlib.models.gpt import GPT, KVCache, prefix_mask

# a GPT that is not a FastGPT gets one converted copy, kept as long as the model lives
_FAST: weakref.WeakKeyDictionary[GPT, FastGPT] = weakref.WeakKeyDictionary()


def fast_of(model: GPT) -> FastGPT:
    """``model`` as a prepared ``FastGPT`` (itself, or one cached copy of its weights)."""
    if isinstance(model, FastGPT):
        return model if model.fast_layers is not None else model.prepare()
    if model not in _FAST:
        _FAST[model] = FastGPT.from_gpt(model)
    return _FAST[model]


class BatchCache:
    """Keys and values of B sequences, each valid up to its own ``lengths[b]``.

    ``pad`` positions past the context take the padding tokens' keys of a row fed fewer tokens
    than the batch's longest near the end of the context (never read)."""

    def __init__(self, model: GPT, batch: int, pad: int = 16) -> None:
        c = model.config
        batch = check_int(batch, "batch", minimum=1)
        self.capacity, self.pad = c.block_size, check_int(pad, "pad", minimum=0)
        # (n_layer, 2 = keys/values, B, H, block_size + pad, D)
        self.kv = torch.zeros(c.n_layer, 2, batch, c.n_head, c.block_size + self.pad, c.n_embd // c.n_head,
                              device=model.device, dtype=model.wte.weight.dtype)
        self.lengths = np.zeros(batch, dtype=np.int64)  # (B,): row b holds positions 0..lengths[b]-1

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def truncate(self, lengths: Sequence[int] | np.ndarray) -> None:
        """Row b forgets everything after its first ``lengths[b]`` positions (a rollback)."""
        new = np.asarray(lengths, dtype=np.int64)
        if new.shape != self.lengths.shape or (new < 0).any() or (new > self.lengths).any():
            raise ValueError(f"lengths must be {self.batch} integers in [0, the current lengths "
                             f"{self.lengths.tolist()}], got {np.asarray(lengths).tolist()}")
        self.lengths = new

    def select(self, rows: Sequence[int] | np.ndarray) -> None:
        """Keep only ``rows`` (in that order): finished sequences leave the batch (one copy)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or len(rows) < 1 or (rows < 0).any() or (rows >= self.batch).any():
            raise ValueError(f"rows must be a non-empty 1-D list of row indices in [0, {self.batch}), "
                             f"got {rows.tolist()}")
        self.kv = self.kv[:, :, torch.as_tensor(rows, device=self.kv.device)]
        self.lengths = self.lengths[rows]

    def row(self, b: int, copy: bool = True) -> KVCache:
        """Row ``b`` as a batch-1 ``KVCache``: a copy (what a fresh prefill of its tokens must
        equal), or with ``copy=False`` a view sharing this cache's storage."""
        out = KVCache.__new__(KVCache)
        out.kv, out.capacity = self.kv[:, :, b], self.capacity  # (n_layer, 2, H, capacity + pad, D)
        if copy:
            out.kv = out.kv[:, :, :, : self.capacity].clone()
        out.length = int(self.lengths[b])
        return out


def _mask(starts: np.ndarray, T: int, end: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
    """The additive attention mask of T new tokens per row after ``starts`` (B,) cached ones,
    over keys 0..end-1: None (everything visible) for one token per row at one length,
    (T, end) when the rows share a length, else (B, 1, T, end)."""
    if (starts == starts[0]).all():
        return None if T == 1 else prefix_mask(None, int(starts[0]), T, device, dtype)
    pos = torch.as_tensor(starts[:, None] + np.arange(T), device=device)  # (B, T)
    allowed = torch.arange(end, device=device)[None, None, :] <= pos[:, :, None]  # (B, T, end)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))[:, None]


def _check_feed(cache: BatchCache, tokens: torch.Tensor, counts: np.ndarray) -> None:
    B, T = tokens.shape
    if B != cache.batch or T < 1 or counts.shape != (B,) or (counts < 0).any() or (counts > T).any():
        raise ValueError(f"tokens must be (B={cache.batch}, T >= 1) and counts {cache.batch} integers in [0, T], "
                         f"got tokens {tuple(tokens.shape)}, counts {counts.tolist()}")
    if (cache.lengths + counts > cache.capacity).any() or int((cache.lengths + T).max()) > cache.capacity + cache.pad:
        raise ValueError(f"the new tokens do not fit the context of {cache.capacity}: lengths "
                         f"{cache.lengths.tolist()} + counts {counts.tolist()} (padded to {T})")


@torch.inference_mode()
def batched_forward(model: GPT, cache: BatchCache, tokens: torch.Tensor | Sequence[Sequence[int]],
                    counts: Sequence[int] | np.ndarray | None = None, last_only: bool = False) -> torch.Tensor:
    """Row b feeds ``tokens[b, :counts[b]]`` (``tokens`` (B, T) right-padded; ``counts`` default
    all T; a row with count 0 feeds nothing) after its ``cache.lengths[b]`` cached positions,
    whose lengths then grow by counts. Returns logits (B, T, V) (padding rows are garbage), or
    with ``last_only`` each row's logits after its last real token (B, V; garbage for count 0)."""
    fast = fast_of(model)
    idx = torch.as_tensor(tokens, dtype=torch.long, device=fast.device)  # (B, T)
    B, T = idx.shape
    counts = np.full(B, T, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    _check_feed(cache, idx, counts)
    if B == 1 and counts[0] == T:  # one row: the fast batch-1 path itself, on a view of the row
        view = cache.row(0, copy=False)
        logits = fast(idx, cache=view)  # (1, T, V)
        cache.lengths = np.array([view.length])
        return logits[:, -1] if last_only else logits
    fast.check_tokens(idx, "tokens")
    starts, block = cache.lengths, fast.config.block_size
    at = torch.as_tensor(starts[:, None] + np.arange(T), device=fast.device)  # (B, T): where each new key goes
    pos = at.clamp(max=block - 1)  # a padding token past the context takes the last position's embedding
    x = (F.embedding(idx, fast.wte.weight) + F.embedding(pos, fast.wpe.weight)).view(B * T, -1)  # (B T, C)
    end = int((starts + T).max())
    mask = _mask(starts, T, end, fast.device, x.dtype)
    # where the new keys go: one slice when the rows share a length, else (rows, positions) (B, T) each
    where: slice | tuple[torch.Tensor, torch.Tensor] = slice(int(starts[0]), int(starts[0]) + T)
    if not (starts == starts[0]).all():
        where = (torch.arange(B, device=fast.device)[:, None].expand(B, T), at)
    for i, layer in enumerate(fast.fast_layers or ()):
        x = _block(fast, x, layer, cache.kv[i], where, B, T, end, mask)
    cache.lengths = starts + counts
    x = x.view(B, T, -1)
    if last_only:
        x = x[torch.arange(B), torch.as_tensor(np.maximum(counts - 1, 0))]  # (B, C)
    return fast.lm_head(x)


def _block(fast: FastGPT, x: torch.Tensor, layer: tuple[torch.Tensor, ...], kv: torch.Tensor,
           where: slice | tuple[torch.Tensor, torch.Tensor], B: int, T: int, end: int,
           mask: torch.Tensor | None) -> torch.Tensor:
    """``FastGPT._block`` with a batch axis: x (B T, C); ``kv`` this layer's (2, B, H, cap, D),
    written at ``where``: one slice of positions (rows sharing a length), or (rows, positions)."""
    ln1_w, ln1_b, qkv_t, qkv_b, proj_t, proj_b, ln2_w, ln2_b, fc_t, fc_b, out_t, out_b = layer
    C, H = x.shape[1], fast.config.n_head
    qkv = torch.addmm(qkv_b, F.layer_norm(x, (C,), ln1_w, ln1_b), qkv_t)  # (B T, 3C)
    qkv = qkv.view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
    if isinstance(where, slice):  # aligned rows: one in-place slice copy, as the batch-1 path
        kv[:, :, :, where] = qkv[1:]
    else:  # each row at its own offset: (B, T, 2, H, D) scattered to (row, position)
        kv[:, where[0], :, where[1]] = qkv[1:].permute(1, 3, 0, 2, 4)
    y = F.scaled_dot_product_attention(qkv[0], kv[0, :, :, :end], kv[1, :, :, :end], attn_mask=mask)  # (B, H, T, D)
    x = torch.addmm(proj_b, y.transpose(1, 2).reshape(B * T, C), proj_t).add_(x)  # x + proj(y)
    h = F.gelu(torch.addmm(fc_b, F.layer_norm(x, (C,), ln2_w, ln2_b), fc_t), approximate="tanh")  # (B T, 4C)
    return torch.addmm(out_b, h, out_t).add_(x)
