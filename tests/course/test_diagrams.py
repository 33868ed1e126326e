"""The course's diagrams draw what they say (matplotlib, no display)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lessonlib.course import diagrams  # noqa: E402


def texts(ax):
    return [t.get_text() for t in ax.texts]


@pytest.mark.parametrize("accepted", [0, 2, 4])
def test_round_timeline_marks_each_position(accepted):
    ax = diagrams.round_timeline(k=4, accepted=accepted, c=0.1, r=1.2)
    labels = texts(ax)
    assert sum("✓" in t for t in labels) == accepted
    assert sum("✗" in t for t in labels) == (accepted < 4)
    assert ("bonus from p" in labels) == (accepted == 4)
    assert any(f"{accepted + 1} token" in t for t in labels)
    plt.close("all")


def test_round_timeline_rejects_impossible_outcomes():
    with pytest.raises(ValueError, match="accepted"):
        diagrams.round_timeline(k=3, accepted=4)


@pytest.mark.parametrize("kind, marker", [("eagle", "top feature"), ("eagle3", "middle feature"), ("mtp", "RMSNorm")])
def test_feature_drafter_flow(kind, marker):
    assert any(marker in t for t in texts(diagrams.feature_drafter_flow(kind)))
    plt.close("all")
    with pytest.raises(ValueError, match="kind"):
        diagrams.feature_drafter_flow("medusa2")
