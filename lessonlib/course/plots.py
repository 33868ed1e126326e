"""The course's figures, so notebooks show one line per plot: ``_ = plots.distributions(...)``.

Every function draws on ``ax`` (a new figure when None) and returns the axes. Colours follow
one convention: p (target) blue, q (draft) orange, overlap min(p, q) green, residual red.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

COLORS = {"p": "tab:blue", "q": "tab:orange", "min(p, q)": "tab:green", "residual": "tab:red"}


def _axes(ax, figsize=(7, 3.2)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def distributions(rows: dict, ax=None, title: str | None = None, labels=None):
    """Grouped bars, one group per token, one bar per named distribution."""
    ax = _axes(ax)
    names = list(rows)
    vocab = len(next(iter(rows.values())))
    width = 0.8 / len(names)
    x = np.arange(vocab)
    for i, name in enumerate(names):
        ax.bar(x + (i - (len(names) - 1) / 2) * width, rows[name], width, label=name, color=COLORS.get(name))
    ax.set_xticks(x, labels if labels is not None else x)
    ax.set_xlabel("token")
    ax.set_ylabel("probability")
    ax.legend(frameon=False, ncols=len(names))
    if title:
        ax.set_title(title)
    return ax


def histogram_vs_exact(counts, probs, ax=None, title: str | None = None, labels=None, z: float = 2.0):
    """Empirical frequencies with ±z binomial standard errors, against the exact probabilities."""
    ax = _axes(ax)
    counts, probs = np.asarray(counts, dtype=float), np.asarray(probs, dtype=float)
    n = counts.sum()
    x = np.arange(len(probs))
    freq = counts / n
    err = z * np.sqrt(probs * (1 - probs) / n)
    ax.bar(x, freq, 0.7, color="0.75", label=f"measured ({int(n):,} samples)")
    ax.errorbar(x, probs, yerr=err, fmt="o", color=COLORS["p"], ms=4, capsize=3, label=f"exact p ± {z:g} s.e.")
    if len(x) <= 40:
        ax.set_xticks(x, labels if labels is not None else x, rotation=90 if len(x) > 16 else 0)
    ax.set_xlabel("outcome")
    ax.set_ylabel("frequency")
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax


def tokens_per_verify(ks, alphas, tokens_fn, ax=None):
    """E[tokens per target pass] against K for each α, with the K → ∞ limit 1/(1 − α) dashed."""
    ax = _axes(ax, (6, 3.6))
    ks = np.asarray(ks)
    for alpha in alphas:
        line, = ax.plot(ks, [tokens_fn(alpha, int(k)) for k in ks], "o-", ms=3, label=f"α = {alpha:g}")
        if alpha < 1:
            ax.axhline(1 / (1 - alpha), color=line.get_color(), ls="--", lw=0.8)
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel("E[tokens per target pass]")
    ax.set_title("dashed: the K → ∞ limit 1/(1 − α)")
    ax.legend(frameon=False)
    return ax


def speedup_vs_k(ks, alphas, c: float, speedup_fn, optimal_k_fn=None, ax=None):
    """Speedup against K for each α at draft cost c; the best K marked with a star."""
    ax = _axes(ax, (6, 3.6))
    ks = np.asarray(ks)
    for alpha in alphas:
        line, = ax.plot(ks, [speedup_fn(alpha, int(k), c) for k in ks], "-", label=f"α = {alpha:g}")
        if optimal_k_fn is not None:
            best = optimal_k_fn(alpha, c, k_max=int(ks.max()))
            ax.plot(best, speedup_fn(alpha, best, c), "*", ms=12, color=line.get_color())
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(f"draft cost c = {c:g} target passes per draft step")
    ax.legend(frameon=False)
    return ax


def measured_vs_theory(ks, measured, predicted, ks_curve=None, curve=None, ax=None, ylabel="speedup"):
    """Measured points against the prediction at the same K, with an optional theory curve."""
    ax = _axes(ax, (6, 3.6))
    if curve is not None:
        ax.plot(ks_curve, curve, "-", color="0.6", label="theory, measured α and c")
    ax.plot(ks, predicted, "s", mfc="none", color=COLORS["p"], label="predicted")
    ax.plot(ks, measured, "o", color=COLORS["q"], label="measured")
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False)
    return ax


def attention_mask(mask, labels=None, ax=None, title: str | None = None):
    """A boolean attention mask as a grid: row i may attend to the filled columns."""
    ax = _axes(ax, (3.6, 3.6))
    mask = np.asarray(mask, dtype=bool)
    ax.imshow(mask, cmap="Blues", vmin=0, vmax=1.4)
    ticks = np.arange(len(mask))
    ax.set_xticks(ticks, labels if labels is not None else ticks)
    ax.set_yticks(ticks, labels if labels is not None else ticks)
    ax.set_xlabel("attends to")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    return ax


# ----------------------------------------------------------------------------- notebook 4: trees


def _tree_layout(parents):
    """(x, y) per node: x = depth (the context at -1), leaves on consecutive rows, a parent
    centred on its children."""
    parents = np.asarray(parents)
    n = len(parents)
    depth = np.zeros(n, dtype=int)
    for i in range(n):
        depth[i] = depth[parents[i]] + 1 if parents[i] >= 0 else 0
    y = np.zeros(n)
    next_row = [0.0]

    def place(node):
        kids = np.flatnonzero(parents == node)
        for k in kids:
            place(k)
        if node >= 0:
            if len(kids):
                y[node] = y[kids].mean()
            else:
                y[node], next_row[0] = next_row[0], next_row[0] + 1

    place(-1)
    roots = np.flatnonzero(parents == -1)
    return depth, y, (float(y[roots].mean()) if len(roots) else 0.0)


def draft_tree(parents, labels, accepted=(), ax=None, title: str | None = None, root_label="context"):
    """Draw a draft tree left to right: one box per node with its label (e.g. the token's text),
    edges to its parent, the accepted root-to-node path in green."""
    parents = np.asarray(parents)
    depth, y, root_y = _tree_layout(parents)
    height = max(2.0, 0.42 * (y.max() + 1 if len(y) else 1))
    ax = _axes(ax, (1.9 * (depth.max() + 2 if len(depth) else 2), height))
    accepted = set(int(a) for a in accepted)
    for i, p in enumerate(parents):
        px, py = (depth[p], y[p]) if p >= 0 else (-1, root_y)
        on_path = i in accepted and (p < 0 or p in accepted)
        ax.plot([px, depth[i]], [py, y[i]], color="tab:green" if on_path else "0.75", lw=2.5 if on_path else 1,
                zorder=1)
    box = dict(boxstyle="round,pad=0.25", fc="white", ec="0.4")
    ax.text(-1, root_y, root_label, ha="center", va="center", bbox=dict(box, fc="0.9"), fontsize=9, zorder=2)
    for i, label in enumerate(labels):
        style = dict(box, fc="#c7e9c0", ec="tab:green") if i in accepted else box
        ax.text(depth[i], y[i], label, ha="center", va="center", bbox=style, fontsize=9, family="monospace", zorder=2)
    ax.set_xlim(-1.6, (depth.max() if len(depth) else 0) + 0.6)
    ax.set_ylim((y.max() if len(y) else 0) + 0.7, -0.7)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def kinds_speedups(rows, ax=None):
    """Wall-clock speedup of every draft kind's chain and tree at T = 0 and T = 1 (``bench.kinds``
    rows), with the inter-quartile range over prompts as error bars."""
    ax = _axes(ax, (9, 3.4))
    settings = [(r["kind"], r["shape"], r["method"]) for r in rows if r["kind"] != "plain" and r["temperature"] == 0]
    x = np.arange(len(settings))
    for offset, t, color in ((-0.2, 0.0, "tab:blue"), (0.2, 1.0, "tab:orange")):
        cells = [next(r for r in rows if r["method"] == m and r["temperature"] == t)["spread"]["speedup"]
                 for _, _, m in settings]
        med = np.array([s["median"] for s in cells])
        err = np.array([[m - s["q25"] for m, s in zip(med, cells)], [s["q75"] - m for m, s in zip(med, cells)]])
        ax.bar(x + offset, med, 0.4, yerr=err, capsize=2, label=f"T = {t:g}", color=color)
    ax.axhline(1, color="0.5", lw=0.8, ls="--")
    ax.set_xticks(x, [m for _, _, m in settings], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speedup over plain")
    ax.legend(frameon=False, fontsize=8)
    return ax


def tree_benchmark(rows, ax=None):
    """Measured tau and wall-clock speedup of each method family (best setting), side by side."""
    ax = _axes(ax, (8, 3.4))
    names = [r["method"] for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["tau"] for r in rows], 0.4, label="τ (tokens per target pass)", color="tab:blue")
    ax.bar(x + 0.2, [r["speedup"] for r in rows], 0.4, label="wall-clock speedup", color="tab:orange")
    ax.axhline(1, color="0.5", lw=0.8, ls="--")
    ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    ax.legend(frameon=False, fontsize=8)
    return ax
