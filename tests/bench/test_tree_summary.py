"""``bench tree``'s summary on constructed per-prompt rows with hand-worked answers: medians (not
means) over prompts, the best of each family by speedup, acceptance by depth pooled over every
round of every prompt, the share of the forward bound, and the targets' boundaries (>=)."""
import pytest

from lessonlib.bench import tree


def run(speedup, tau, accepted_lengths=None, **extra):
    row = {"speedup": speedup, "tau": tau, "forward_bound": 2 * speedup, "k": 4}
    if accepted_lengths is not None:  # a tree loop's row: its histogram of accepted drafts per round
        depth = len(accepted_lengths) - 1
        row |= {"accepted_lengths": accepted_lengths, "acceptance_by_depth": [0.0] * depth, "mean_nodes": 4.0}
    return row | extra


def test_summary_rows_are_medians_and_the_best_of_each_family():
    table = {"tree a": ("tree draft-kl", None), "tree b": ("tree draft-kl", None)}
    results = {
        "plain": [{"seconds": 1.0}] * 5,
        "tree a": [run(s, t, [1, 1]) for s, t in zip([1.0, 2.0, 3.0, 4.0, 20.0], [1.0, 1.5, 2.0, 2.5, 9.0])],
        "tree b": [run(s, 3.0, [0, 1, 1], mean_nodes=n) for s, n in zip([2.0, 2.5, 3.5, 3.6, 3.7], [1, 2, 3, 9, 9])],
    }
    rows, best = tree.summarise(table, results)
    a, b = (next(r for r in rows if r["method"] == m) for m in ("tree a", "tree b"))
    assert (a["speedup"], a["tau"], a["prompts"]) == (3.0, 2.0, 5)  # means would be 6.0 and 3.2
    assert a["spread"]["speedup"]["q25"] == 2.0 and a["spread"]["speedup"]["q75"] == 4.0
    assert b["speedup"] == 3.5 and best["tree draft-kl"] is b  # 3.5 > 3.0
    assert b["mean_nodes"] == 3.0
    # pooled: b's rounds accepted 1 or 2 drafts, five each: depth 0 all passed, depth 1 half
    assert b["acceptance_by_depth"] == [1.0, 0.5]
    plain = next(r for r in rows if r["method"] == "plain")
    assert (plain["speedup"], plain["tau"]) == (1.0, 1.0)


def test_bound_share_and_the_targets_at_their_boundaries():
    row = {"speedup": 1.8, "spread": {"forward_bound": {"median": 2.0}}}
    assert tree.bound_share(row) == pytest.approx(0.9)
    assert tree.bound_share({"speedup": 1.0, "spread": {}}) is None

    def rows(chain_speedup, chain_tau, tree_tau, eagle_speedup, share=0.9):
        spread = {"forward_bound": {"median": 1.0}}
        chain = {"method": "chain", "family": "chain draft-kl", "speedup": chain_speedup, "tau": chain_tau,
                 "spread": spread}
        other = {"method": "other", "family": "other", "speedup": share, "tau": 1.0, "spread": spread}
        tree_row = {"method": "tree", "family": "tree draft-kl", "speedup": 1.0, "tau": tree_tau, "spread": spread}
        eagle = {"method": "eagle", "family": "EAGLE tree", "speedup": eagle_speedup, "tau": 3.0, "spread": spread}
        return [chain, tree_row, eagle, other], {"chain draft-kl": chain}

    met = {k: v["met"] for k, v in tree.check_targets(*rows(2.0, 2.5, 3.0, 2.5)).items()}
    assert all(met.values()), met  # every target exactly at its threshold is reached
    missed = {k: v["met"] for k, v in tree.check_targets(*rows(1.99, 2.5, 2.99, 2.49, share=0.89)).items()}
    assert not any(missed.values()), missed
    ratio = tree.check_targets(*rows(2.4, 2.0, 3.0, 2.75))  # 2.75 < 1.15 * 2.4 = 2.76
    assert not ratio["best EAGLE family >= 2.5x and >= 1.15 x best chain"]["met"]
