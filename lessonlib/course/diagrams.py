"""Diagrams for the places where the prose is dense: one speculative round on a timeline, and
the data flow of each draft kind that reads the target's features (EAGLE, EAGLE-3, MTP).

Each function draws on ``ax`` (a new figure when None) and returns the axes; the timeline's
widths are proportional to the costs it is given (c and r in one-token target steps), so a
notebook can draw it with its own measured numbers.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from lessonlib.core.validate import check_int
from lessonlib.course.plots import COLORS

ACCEPT, REJECT, BONUS = "tab:green", "tab:red", "tab:purple"


def _axes(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.set_axis_off()
    return ax


def _box(ax, x, y, w, h, text, color, fontsize=8, alpha=0.85, text_color="white"):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.03", fc=color, ec="0.2",
                                lw=0.6, alpha=alpha))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, color=text_color)


def _arrow(ax, xy_from, xy_to, color="0.3"):
    ax.add_patch(FancyArrowPatch(xy_from, xy_to, arrowstyle="-|>", mutation_scale=9, color=color, lw=0.8))


def round_timeline(k: int = 4, accepted: int = 2, c: float = 0.1, r: float = 1.2, ax=None):
    """One round of chain speculative decoding drawn against time, in one-token target steps:
    K draft steps of cost c, one target pass over K + 1 positions of cost r, the accept/reject
    outcome per draft, the correction (or bonus) token, and the KV rollback of the rejected
    suffix. ``accepted`` (0..K) drafts pass; K means the bonus token is taken."""
    accepted = check_int(accepted, "accepted", minimum=0, maximum=k)  # 0..K drafts pass
    ax = _axes(ax, (9, 2.6))
    for j in range(k):  # the draft steps, one after another
        _box(ax, j * c, 2.0, c * 0.95, 0.6, f"q{j + 1}" if c * 9 > 0.25 else "", COLORS["q"])
    _box(ax, k * c, 2.0, r * 0.98, 0.6, f"target: 1 pass over K + 1 = {k + 1} positions (r = {r:g})", COLORS["p"])
    end = k * c + r
    slot = (end - 0.05) / (k + 1)
    for j in range(k + 1):  # what each position of the verify pass decides
        if j < accepted:
            color, text = ACCEPT, f"x{j + 1} ✓"
        elif j == accepted and accepted < k:
            color, text = REJECT, f"x{j + 1} ✗ → resample"
        elif j == k and accepted == k:
            color, text = BONUS, "bonus from p"
        elif j == k:
            color, text = "0.85", "bonus slot unused"
        else:
            color, text = "0.85", f"x{j + 1} dropped"
        _box(ax, j * slot, 1.0, slot * 0.95, 0.6, text, color, fontsize=7,
             text_color="black" if color == "0.85" else "white")
    kept = accepted + 1
    ax.text(0, 0.55, f"emitted this round: {kept} token{'s' if kept > 1 else ''} for one target pass; "
            f"the KV caches roll back the {k - accepted} rejected position{'s' if k - accepted != 1 else ''} "
            f"(a truncate, nothing recomputed)", fontsize=8, va="center")
    ax.annotate("", xy=(end, 0.25), xytext=(0, 0.25), arrowprops={"arrowstyle": "-|>", "color": "0.4"})
    ax.text(end, 0.05, f"time: K·c + r = {k * c + r:.2f} target steps", ha="right", fontsize=8, color="0.3")
    ax.set_xlim(-0.05, end + 0.05)
    ax.set_ylim(0, 2.8)
    ax.set_title(f"One speculative round, K = {k}: draft, verify in one pass, accept a prefix, correct, roll back",
                 fontsize=9)
    return ax


def feature_drafter_flow(kind: str = "eagle", ax=None):
    """The data flow of a draft that reads the target's features.

    ``eagle``: token embedding ⊕ the target's top feature → fc → one block → the target's LM
    head → the tree; deeper steps feed the head its own output. ``eagle3``: low, middle and
    top features fused first, direct token prediction. ``mtp``: DeepSeek-V3 modules, one per
    depth, each RMS-normalising both inputs."""
    if kind not in ("eagle", "eagle3", "mtp"):
        raise ValueError(f"kind must be 'eagle', 'eagle3' or 'mtp', got {kind!r}")
    ax = _axes(ax, (9, 2.8))
    who = "target (trained with\nthe modules)" if kind == "mtp" else "target (frozen)\nlast pass"
    _box(ax, 0.0, 1.6, 1.6, 0.5, who, COLORS["p"])
    if kind == "eagle3":
        for i, name in enumerate(("low", "middle", "top")):
            _box(ax, 1.9, 2.25 - 0.45 * i, 1.0, 0.35, f"{name} feature", COLORS["p"], alpha=0.55, text_color="black")
            _arrow(ax, (1.6, 1.85), (1.9, 2.42 - 0.45 * i))
        _box(ax, 3.1, 1.6, 0.9, 0.5, "fuse\n(3C → C)", "0.45")
        for i in range(3):
            _arrow(ax, (2.9, 2.42 - 0.45 * i), (3.1, 1.85))
        feat_end = 4.0
    else:
        _box(ax, 1.9, 1.6, 1.3, 0.5, "h: top feature" if kind == "eagle" else "h⁰: top feature", COLORS["p"],
             alpha=0.55, text_color="black")
        _arrow(ax, (1.6, 1.85), (1.9, 1.85))
        feat_end = 3.2
    _box(ax, 1.9, 0.5, 1.3, 0.5, "embedding of\nthe next token", "0.6")
    label = "RMSNorm both,\nconcat → fc\n(2C → C)" if kind == "mtp" else "concat\n→ fc (2C → C)"
    _box(ax, feat_end + 0.3, 1.0, 1.3, 0.7, label, "0.35", fontsize=7 if kind == "mtp" else 8)
    _arrow(ax, (feat_end, 1.85), (feat_end + 0.3, 1.5))
    _arrow(ax, (3.2, 0.75), (feat_end + 0.3, 1.2))
    _box(ax, feat_end + 1.9, 1.0, 1.1, 0.7, "one decoder\nblock", "0.25")
    _arrow(ax, (feat_end + 1.6, 1.35), (feat_end + 1.9, 1.35))
    head = ("target's LM head\n(shared here; the\npaper's has its own)" if kind == "eagle3"
            else "target's LM head\n(shared)")
    _box(ax, feat_end + 3.3, 1.0, 1.3, 0.7, head, COLORS["p"], fontsize=7 if kind == "eagle3" else 8)
    _arrow(ax, (feat_end + 3.0, 1.35), (feat_end + 3.3, 1.35))
    _box(ax, feat_end + 4.9, 1.0, 1.0, 0.7, "draft tokens\n→ tree", COLORS["q"])
    _arrow(ax, (feat_end + 4.6, 1.35), (feat_end + 4.9, 1.35))
    loop = {"eagle": "deeper steps: the head's own output g replaces h",
            "eagle3": "deeper steps: the head's own output replaces the fused feature (training-time test)",
            "mtp": "depth d uses module d on module d−1's output: one module per drafted token"}[kind]
    ax.annotate("", xy=(feat_end + 0.95, 1.0), xytext=(feat_end + 2.45, 1.0),
                arrowprops={"arrowstyle": "-|>", "color": "tab:orange", "connectionstyle": "arc3,rad=-0.5"})
    ax.text(feat_end + 1.7, 0.2, loop, ha="center", fontsize=8, color="tab:orange")
    title = {"eagle": "EAGLE (Li et al. 2024)", "eagle3": "EAGLE-3 (Li et al. 2025)",
             "mtp": "Multi-token prediction modules (DeepSeek-V3)"}[kind]
    ax.set_title(title + ": what the draft head reads and where its tokens go", fontsize=9)
    ax.set_xlim(-0.1, feat_end + 6.0)
    ax.set_ylim(0, 2.8)
    return ax
