"""Widget logic as plain functions: right numbers, and no crash on a student's stub or bug."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lessonlib.core import sampling, theory  # noqa: E402
from lessonlib.course import widgets  # noqa: E402


def stub(*args, **kwargs):
    raise NotImplementedError("exercise 2c: to do")


def buggy(*args, **kwargs):
    return 1 / 0


REFS = (theory.expected_tokens_per_verify, theory.expected_speedup, theory.optimal_k)


def test_safe_call_returns_value_or_message():
    assert widgets.safe_call(lambda x: x + 1, 1) == (2, None)
    value, error = widgets.safe_call(stub)
    assert value is None and "not implemented yet" in error and "exercise 2c" in error
    value, error = widgets.safe_call(buggy)
    assert value is None and error.startswith("ZeroDivisionError")


def test_speedup_summary_matches_theory():
    s = widgets.speedup_summary(0.8, 4, 0.05, *REFS, k_max=16)
    assert s["error"] is None
    assert s["tokens"] == pytest.approx(3.3616)
    assert s["speedup"] == pytest.approx(3.3616 / 1.2)
    assert s["wall_time"] == pytest.approx(1.2 / 3.3616)
    assert s["best_k"] == theory.optimal_k(0.8, 0.05, k_max=16)
    assert s["best_speedup"] == pytest.approx(theory.expected_speedup(0.8, s["best_k"], 0.05))


def test_speedup_text_says_faster_or_slower():
    assert "faster than plain decoding" in widgets.speedup_text(widgets.speedup_summary(0.8, 4, 0.05, *REFS))
    # alpha below break-even: slower
    slow = widgets.speedup_summary(0.1, 8, 0.3, *REFS)
    assert slow["speedup"] < 1 and "slower than plain decoding" in widgets.speedup_text(slow)


@pytest.mark.parametrize("broken", [stub, buggy])
def test_speedup_summary_survives_a_broken_function(broken):
    s = widgets.speedup_summary(0.8, 4, 0.05, theory.expected_tokens_per_verify, broken, theory.optimal_k)
    assert s["error"] and s["speedup"] is None and s["wall_time"] is None
    assert "cannot compute" in widgets.speedup_text(s)


def test_speedup_curve():
    ks, values, error = widgets.speedup_curve(0.7, 0.05, theory.expected_speedup, k_max=8)
    assert error is None and list(ks) == list(range(1, 9))
    assert values == pytest.approx([theory.expected_speedup(0.7, k, 0.05) for k in range(1, 9)])
    ks, values, error = widgets.speedup_curve(0.7, 0.05, stub, k_max=8)
    assert np.isnan(values).all() and "not implemented" in error


def test_acceptance_summary():
    p = np.random.default_rng(0).dirichlet(np.ones(12))
    s = widgets.acceptance_summary(p, 0.7, k=4, c=0.05)
    assert s["alpha"] == pytest.approx(0.7, abs=1e-9)
    assert s["overlap"].sum() == pytest.approx(s["alpha"])
    # the rule's identity: accepted part + (1 - alpha) * residual = p
    assert s["overlap"] + (1 - s["alpha"]) * s["residual"] == pytest.approx(p, abs=1e-12)
    assert s["residual"] == pytest.approx(sampling.residual(p, s["q"]))
    assert s["tokens"] == pytest.approx(theory.expected_tokens_per_verify(0.7, 4))
    assert s["speedup"] == pytest.approx(theory.expected_speedup(0.7, 4, 0.05))


@pytest.mark.parametrize("fns", [REFS, (stub, stub, stub), (buggy, buggy, buggy)])
def test_speedup_explorer_builds_with_any_functions(fns):
    box = widgets.speedup_explorer(*fns)
    controls, text, image = box.children
    assert [c.description for c in controls.children] == ["α", "K", "c"]
    before = text.value
    controls.children[0].value = 0.5  # moving a slider redraws the text
    assert text.value != before and "0.50" in text.value
    assert bytes(image.value).startswith(b"\x89PNG")  # the curve is drawn even when some functions fail


def test_acceptance_explorer_builds_and_survives_unreachable_alpha():
    box = widgets.acceptance_explorer(np.random.default_rng(0).dirichlet(np.ones(12)))
    controls, text, image = box.children
    assert "Σ min(p, q) = 0.700" in text.value and bytes(image.value).startswith(b"\x89PNG")
    slider = controls.children[0]
    slider.value = slider.min  # may be unreachable for this p: must say so, not raise
    assert text.value.count("α = 0.30") == 1 or "Σ min(p, q) = 0.300" in text.value


def test_tree_explorer_shows_the_chosen_measurement():
    import json
    import pathlib

    report = json.loads((pathlib.Path(__file__).parents[2] / "outputs/benchmarks/tree.json").read_text())
    box = widgets.tree_explorer(report)
    (choice,), text = box.children[0].children, box.children[1]
    assert len(box.children) == 2  # text only: no empty image to show
    first = text.value
    choice.value = choice.options[-1]
    assert text.value != first and choice.options[-1] in text.value


def test_live_view_changes_widgets_only_after_the_figure_is_rasterised(monkeypatch):
    """The text must never show a new value over the old figure: the PNG is made before any widget
    changes, the image goes out before the text, and a render without a figure hides the image."""
    import ipywidgets as w
    from matplotlib.figure import Figure

    events = []
    real_png = widgets.figure_png
    monkeypatch.setattr(widgets, "figure_png", lambda fig: (events.append("png"), real_png(fig))[1])

    def render(x):
        if x == 2:
            return "no figure at 2", None
        fig = Figure(figsize=(2, 1))
        fig.subplots().plot([0, x])
        return f"x = {x}", fig

    slider = w.IntSlider(value=0, min=0, max=2)
    box = widgets.live_view(render, {"x": slider})
    _, text, image = box.children
    text.observe(lambda ch: events.append("text"), names="value")
    image.observe(lambda ch: events.append("image"), names="value")
    image.layout.observe(lambda ch: events.append(f"display {ch['new']}"), names="display")
    first = bytes(image.value)
    events.clear()
    slider.value = 1
    assert events == ["png", "image", "text"] and "x = 1" in text.value and bytes(image.value) != first
    events.clear()
    slider.value = 2
    assert events == ["display none", "text"] and "no figure at 2" in text.value
    events.clear()
    slider.value = 0
    assert events == ["png", "image", "display None", "text"] and bytes(image.value) == first
