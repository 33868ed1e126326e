"""Interactive controls for the notebooks (ipywidgets). The logic lives in plain functions
(``*_summary``, ``*_curve``) that the tests call directly; the widgets only draw.

Callbacks may call a student's function that is still a stub or has a bug, so every call
goes through ``safe_call``: the widget shows the message instead of a traceback.

Every explorer is a ``live_view``: controls, a text line and a PNG image, redrawn by setting
the widgets' values. No ``Output`` widget captures prints or figures, because JupyterLab 4
handles widget messages on a second kernel thread and a capture in flight there can be cut
short (a half-drawn figure; found by the browser test).

The text a widget shows goes through ``messages`` (the student's language). A figure's labels do
too, but their Persian entries are symbols (K*, min(p, q)), not Persian words: matplotlib draws
Persian letters unjoined and left to right.
"""
from __future__ import annotations

import html
import io

import numpy as np
from matplotlib.figure import Figure

from lessonlib.course import plots
from lessonlib.course.messages import _, say, translated


def figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96)
    return buffer.getvalue()


def live_view(render, controls: dict, figure: bool = True):
    """``controls`` above a text block and (with ``figure``) an image; ``render(**values) ->
    (text, Figure or None)`` runs now and whenever a control changes. A render that returns no
    figure (an error message) hides the image rather than showing an empty one."""
    import ipywidgets as w

    text = w.HTML()
    image = w.Image(format="png") if figure else None

    def update(_=None):
        # Everything slow (the render, rasterising the figure) happens before any widget changes,
        # and the image goes out before the text: a student (or the browser test) who sees the new
        # text also has the new figure, never the new text over the old figure for the length of a
        # savefig on a busy CPU (found by the browser test).
        message, fig = render(**{name: control.value for name, control in controls.items()})
        png = figure_png(fig) if image is not None and fig is not None else None
        if image is not None:
            if png is not None:
                image.value = png
            image.layout.display = "none" if png is None else None
        text.value = f"<pre style='white-space: pre-wrap; margin: 0'>{html.escape(message)}</pre>"

    for control in controls.values():
        control.observe(update, names="value")
    update()
    return w.VBox([w.HBox(list(controls.values())), text] + ([image] if figure else []))


def safe_call(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), None)``, or ``(None, message)`` if it raises."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError as err:
        return None, say("not implemented yet ({error})", error=translated(str(err)))  # a stub's message
    except Exception as err:  # a widget must survive any student bug
        return None, f"{type(err).__name__}: {err}"


# ----------------------------------------------------------------------------- speedup explorer


def speedup_curve(alpha: float, c: float, speedup_fn, k_max: int = 16):
    """K = 1..k_max and the speedup at each (NaN where ``speedup_fn`` fails), plus the first error."""
    ks = np.arange(1, k_max + 1)
    values, errors = zip(*(safe_call(speedup_fn, alpha, int(k), c) for k in ks))
    error = next((e for e in errors if e), None)
    return ks, np.array([np.nan if v is None else float(v) for v in values]), error


def speedup_summary(alpha: float, k: int, c: float, tokens_fn, speedup_fn, optimal_k_fn, k_max: int = 16) -> dict:
    """Everything the explorer prints for one slider setting.

    tokens = E(α, K); speedup = E/(K·c + 1); wall_time = (K·c + 1)/E target passes per token;
    best_k / best_speedup = the optimum over K = 1..k_max; error = the first failure, if any.
    """
    tokens, err_tokens = safe_call(tokens_fn, alpha, k)
    speedup, err_speedup = safe_call(speedup_fn, alpha, k, c)
    best_k, err_best = safe_call(optimal_k_fn, alpha, c, k_max=k_max)
    best_speedup, err_best_speedup = (None, None) if best_k is None else safe_call(speedup_fn, alpha, best_k, c)
    error = err_tokens or err_speedup or err_best or err_best_speedup
    return {
        "alpha": alpha, "k": k, "c": c,
        "tokens": tokens, "speedup": speedup,
        "wall_time": None if speedup is None else 1 / speedup,
        "best_k": best_k, "best_speedup": best_speedup,
        "error": error,
    }


def speedup_text(s: dict) -> str:
    """One paragraph describing a ``speedup_summary``."""
    if s["error"]:
        return say("α = {alpha:.2f}, K = {k}, c = {c:.2f}: cannot compute — {error}", alpha=s["alpha"], k=s["k"],
                   c=s["c"], error=s["error"])
    verdict = (_("faster than plain decoding") if s["speedup"] > 1 + 1e-9 else
               _("slower than plain decoding") if s["speedup"] < 1 - 1e-9 else _("as fast as plain decoding"))
    return (say("α = {alpha:.2f}, K = {k}, c = {c:.2f}: {tokens:.2f} tokens per target pass, "
                "{wall_time:.3f} target passes per token → {speedup:.2f}× ({verdict}).", alpha=s["alpha"], k=s["k"],
                c=s["c"], tokens=s["tokens"], wall_time=s["wall_time"], speedup=s["speedup"], verdict=verdict) + "\n"
            + say("Best K at this α and c: {best_k} → {best_speedup:.2f}×.", best_k=s["best_k"],
                  best_speedup=s["best_speedup"]))


def speedup_explorer(tokens_fn, speedup_fn, optimal_k_fn, alpha=0.8, k=4, c=0.05, k_max=16):
    """Sliders for α, K and c; prints ``speedup_text`` and draws the speedup curve over K."""
    import ipywidgets as w

    sliders = {
        "alpha": w.FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01, description="α", continuous_update=False),
        "k": w.IntSlider(value=k, min=1, max=k_max, description="K", continuous_update=False),
        "c": w.FloatSlider(value=c, min=0.0, max=0.5, step=0.01, description="c", continuous_update=False),
    }

    def render(alpha, k, c):
        summary = speedup_summary(alpha, k, c, tokens_fn, speedup_fn, optimal_k_fn, k_max)
        ks, values, _error = speedup_curve(alpha, c, speedup_fn, k_max)
        fig = Figure(figsize=(6, 3), layout="constrained")
        ax = fig.subplots()
        ax.plot(ks, values, "-o", ms=3, color=plots.COLORS["p"])
        if summary["speedup"] is not None:
            ax.plot(k, summary["speedup"], "o", ms=9, mfc="none", color="k", label=_("your K"))
        if summary["best_speedup"] is not None:
            ax.plot(summary["best_k"], summary["best_speedup"], "*", ms=12, color=plots.COLORS["q"], label=_("best K"))
        ax.axhline(1, color="k", lw=0.8)
        ax.set_xlabel("K")
        ax.set_ylabel("speedup")
        if ax.get_legend_handles_labels()[1]:
            ax.legend(frameon=False)
        return speedup_text(summary), fig

    return live_view(render, sliders)


# ----------------------------------------------------------------------------- acceptance explorer


def acceptance_summary(p, alpha: float, k: int = 4, c: float = 0.05, seed: int = 0) -> dict:
    """A draft q with acceptance rate ``alpha`` against p, and what it implies.

    q from ``draft_with_alpha``; overlap = min(p, q) (what accepted drafts cover); residual =
    norm(max(p − q, 0)); measured_alpha = Σ min(p, q); tokens = E(α, k) and speedup at cost c.
    """
    from lessonlib.core import chain, sampling, theory

    q = chain.draft_with_alpha(p, alpha, np.random.default_rng(seed))
    measured = sampling.acceptance_rate(p, q)
    return {
        "q": q, "overlap": np.minimum(p, q), "residual": sampling.residual(p, q),
        "alpha": measured, "tokens": theory.expected_tokens_per_verify(measured, k),
        "speedup": theory.expected_speedup(measured, k, c), "k": k, "c": c,
    }


def acceptance_explorer(p, k: int = 4, c: float = 0.05):
    """A slider for α: draws p, a draft q with that acceptance rate, their overlap and the residual."""
    import ipywidgets as w

    slider = w.FloatSlider(value=0.7, min=0.3, max=1.0, step=0.05, description="α", continuous_update=False)

    def render(alpha):
        s, error = safe_call(acceptance_summary, p, alpha, k, c)
        if error:
            return f"α = {alpha:.2f}: {error}", None
        fig = Figure(figsize=(10, 3), layout="constrained")
        axes = fig.subplots(1, 2, sharey=True)
        plots.distributions({"p": p, "q": s["q"]}, ax=axes[0], title=_("target p and draft q"))
        plots.distributions({"min(p, q)": s["overlap"], "residual": s["residual"]}, ax=axes[1],
                            title=_("accepted part and residual"))
        return say("Σ min(p, q) = {alpha:.3f}; with K = {k}: {tokens:.2f} tokens per target pass, "
                   "{speedup:.2f}× at draft cost c = {c}", alpha=s["alpha"], k=k, tokens=s["tokens"],
                   speedup=s["speedup"], c=c), fig

    return live_view(render, {"alpha": slider})


# ----------------------------------------------------------------------------- tree explorer (notebook 4)


def tree_summary(report: dict, method: str) -> str:
    """One measured row of ``outputs/benchmarks/tree.json`` as text: tau, speedup, tree size,
    draft cost and the verify cost of a forward over that many positions."""
    row = next(r for r in report["rows"] if r["method"] == method)
    cost = report["verify_cost"]
    lines = [say("{method}: τ = {tau:.2f} tokens per target pass, wall-clock speedup {speedup:.2f}×", method=method,
                 tau=row["tau"], speedup=row["speedup"])]
    if "mean_nodes" in row:
        n = row["mean_nodes"] + 1
        near = min(cost, key=lambda c: abs(c["new_tokens"] - n))
        lines.append(say("tree of {nodes:.0f} nodes: one verify pass over {positions:.0f} positions ≈ "
                         "{ratio:.2f}× a one-token pass (measured at {measured})", nodes=row["mean_nodes"],
                         positions=n, ratio=near["tree_vs_one_token"], measured=near["new_tokens"]))
        lines.append(say("drafting the tree costs {cost:.2f} verify passes per round",
                         cost=row["draft_cost_per_round"]))
        lines.append(say("acceptance by depth: {rates}", rates=", ".join(
            "-" if a is None else f"{a:.2f}" for a in row["acceptance_by_depth"])))
    elif "alpha" in row:
        lines.append(say("chain: α = {alpha:.2f}, measured c = {c:.3f}", alpha=row["alpha"], c=row["c"]))
    return "\n".join(lines)


def tree_explorer(report: dict):
    """Dropdown over the measured methods; shows ``tree_summary`` (cached numbers, instant)."""
    import ipywidgets as w

    methods = [r["method"] for r in report["rows"] if r["method"] != "plain"]
    choice = w.Dropdown(options=methods, value=methods[0], description=_("method"), layout=w.Layout(width="460px"))
    return live_view(lambda method: (tree_summary(report, method), None), {"method": choice}, figure=False)
