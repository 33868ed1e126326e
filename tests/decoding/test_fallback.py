"""Break-even temperature, the fallback policy and its stream driver (lessonlib.decoding.fallback)."""
import numpy as np
import pytest
import torch

from lessonlib.core import theory
from lessonlib.decoding import decode, fallback
from lessonlib.models import GPT, GPTConfig

K, C = 4, 0.1


# ----------------------------------------------------------------------------- break-even temperature

@pytest.mark.parametrize("seed", range(10))
def test_breakeven_temperature_satisfies_its_definition(seed):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.1, 0.5, 9)) - 0.1
    a = np.sort(rng.uniform(0, 1, 9))[::-1]  # a falling curve that crosses most break-evens
    c = float(rng.uniform(0.02, 0.4))
    a_star = theory.breakeven_alpha(1, c)
    t_star = fallback.breakeven_temperature(t, a, c)
    if np.isfinite(t_star):
        alpha_there = np.interp(t_star, t, a)
        # best-K speedup is exactly 1 at the returned temperature ...
        best_k = theory.optimal_k(alpha_there, c)
        assert theory.expected_speedup(alpha_there, best_k, c) == pytest.approx(1.0, abs=1e-9)
        # ... and above 1 at every measured temperature before it (the *first* crossing)
        before = np.linspace(t[0], t_star, 200)[:-1]
        if t_star > t[0]:
            assert np.all(np.interp(before, t, a) > a_star)
    else:
        assert np.all(a > a_star)
    # a fixed K: the speedup E/(Kc+1) at the returned temperature is 1
    t_k = fallback.breakeven_temperature(t, a, c, k=K)
    if np.isfinite(t_k) and t_k > t[0]:
        assert theory.expected_speedup(np.interp(t_k, t, a), K, c) == pytest.approx(1.0, abs=1e-9)
        assert t_k <= t_star  # a fixed K breaks even earlier than the best K


def test_best_k_breakeven_alpha_is_c():
    # alpha = c is where no K pays: K = 1 gives exactly 1, every larger K less
    for c in (0.01, 0.1, 0.3):
        assert theory.breakeven_alpha(1, c) == pytest.approx(c)
        assert max(theory.expected_speedup(c, k, c) for k in range(1, 33)) == pytest.approx(1.0)


def test_breakeven_temperature_edges():
    t = [0.0, 1.0, 2.0]
    assert fallback.breakeven_temperature(t, [0.9, 0.8, 0.7], 0.1) == np.inf  # always pays
    assert fallback.breakeven_temperature(t, [0.05, 0.9, 0.9], 0.1) == 0.0  # never pays at T_0
    assert fallback.breakeven_temperature(t, [0.9, 0.1, 0.9], 0.1) == pytest.approx(1.0)  # exactly at a point
    # non-monotone curve: the first crossing, not the last
    assert fallback.breakeven_temperature([0, 1, 2, 3], [0.9, 0.0, 0.9, 0.0], 0.45) == pytest.approx(0.5)
    assert fallback.breakeven_temperature(t, [0.99, 0.99, 0.99], 1.5) == 0.0  # c > 1: nothing pays


@pytest.mark.parametrize("args, name", [
    (([0, 1, 2], [0.5, 0.4], 0.1), "same length"),
    (([0, 0, 1], [0.5, 0.4, 0.3], 0.1), "increasing"),
    (([1, 0], [0.5, 0.4], 0.1), "increasing"),
    (([-1, 0], [0.5, 0.4], 0.1), "increasing"),
    (([0, 1], [0.5, 1.2], 0.1), "alphas"),
    (([0, 1], [0.5, np.nan], 0.1), "alphas"),
    (([0], [0.5], 0.1), "temperatures"),
    (([0, 1], [0.5, 0.4], -0.1), "c must"),
    (([0, 1], [0.5, 0.4], np.inf), "c must"),
])
def test_breakeven_temperature_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        fallback.breakeven_temperature(*args)
    with pytest.raises(ValueError, match="k must"):
        fallback.breakeven_temperature([0, 1], [0.5, 0.4], 0.1, k=0)


def test_alpha_for_speedup_inverts_the_speedup():
    for k in (1, 2, 4, 8):
        for c in (0.0, 0.05, 0.2):
            assert fallback.alpha_for_speedup(1.0, k, c) == pytest.approx(theory.breakeven_alpha(k, c), abs=1e-12)
            top = (k + 1) / (k * c + 1)
            for s in np.linspace(1 / (k * c + 1), top, 7)[1:-1]:
                assert theory.expected_speedup(fallback.alpha_for_speedup(s, k, c), k, c) == pytest.approx(s, abs=1e-12)
    # outside the reachable range: no alpha reaches it (inf), or every alpha does (0)
    assert fallback.alpha_for_speedup(6.0, 4, 0.1) == np.inf  # above (K+1)/(Kc+1) = 3.57
    assert fallback.alpha_for_speedup(0.5, 4, 0.1) == 0.0  # below 1/(Kc+1) = 0.71
    for bad in (0.0, -1.0, np.nan, np.inf, [1.2, -1.0]):  # the one inverse (theory's) broadcasts, checking each
        with pytest.raises(ValueError, match="speedup must be"):
            fallback.alpha_for_speedup(bad, 4, 0.1)
    with pytest.raises(ValueError, match="k must"):
        fallback.alpha_for_speedup(1.0, 0, 0.1)


# ----------------------------------------------------------------------------- the alpha estimate

def test_alpha_mle_is_unbiased_where_accepted_over_drafted_is_not():
    rng = np.random.default_rng(0)
    alpha, rounds = 0.6, 20_000
    ok = rng.random((rounds, K)) < alpha
    accepted = np.cumprod(ok, axis=1).sum(axis=1)
    rejected = (accepted < K).astype(int)
    est = fallback.alpha_mle(accepted, rejected)
    se = np.sqrt(alpha * (1 - alpha) / (accepted.sum() + rejected.sum()))
    assert abs(est - alpha) < 4 * se  # false-alarm rate ~6e-5
    # negative control: accepted / drafted (what engines call acceptance rate) is far off
    assert abs(accepted.sum() / (K * rounds) - alpha) > 20 * se
    assert np.isnan(fallback.alpha_mle([], []))


# ----------------------------------------------------------------------------- the policy

def _switches(alpha, seed, n=5000, **kw):
    policy = fallback.FallbackPolicy(K, C, **kw)
    return fallback.simulate_stream(np.full(n, alpha), policy, K, C, np.random.default_rng(seed))["switches"]


@pytest.mark.parametrize("seed", range(4))
def test_policy_does_not_flap_under_noise(seed):
    # clearly worth it (S = 1.65 at alpha 0.6): never switches off over 5000 tokens
    assert theory.expected_speedup(0.6, K, C) > 1.6
    assert _switches(0.6, seed) == []
    # clearly not (S = 0.75 at alpha 0.05): switches off once, within one window, and stays off
    sw = _switches(0.05, seed)
    assert [to for _, to in sw] == ["off"] and sw[0][0] <= 2 * 32


def test_an_unreachable_threshold_is_kept_on_purpose():
    # at K, C with a costly verify (r = 4.5) the best possible speedup is (K+1)/(K C + 3) < 1.2:
    top = (K + 1) / (K * C + 4.5)
    assert top < 1.2
    policy = fallback.FallbackPolicy(K, C, r=4.5, on_above=1.2)
    assert policy.alpha_on == np.inf
    # so even perfect drafts, once the policy is off, never switch it back on ...
    for _ in range(policy.min_rounds):
        policy.record(0, K)
    assert not policy.speculating
    for _ in range(50):
        policy.record(K, K)
    assert not policy.speculating and [to for _, to in policy.switches] == ["off"]
    # ... while a reachable threshold does (the control)
    control = fallback.FallbackPolicy(K, C, r=4.5, on_above=0.99 * top)
    for _ in range(control.min_rounds):
        control.record(0, K)
    for _ in range(50):
        control.record(K, K)
    assert control.speculating


def test_hysteresis_and_window_are_what_stop_flapping():
    # negative control: no hysteresis band and a 4-round window flap at a clearly good alpha
    flappy = [len(_switches(0.6, s, window=4, min_rounds=4, probe_window=1, on_above=1.0 + 1e-9)) for s in range(3)]
    steady = [len(_switches(0.6, s)) for s in range(3)]
    assert min(flappy) >= 10 * max(1, max(steady))


@pytest.mark.parametrize("seed", range(4))
def test_policy_switches_within_bounded_verifications_after_a_phase_change(seed):
    n = 1500
    alphas = np.r_[np.full(n, 0.8), np.full(n, 0.02), np.full(n, 0.8)]
    trace = fallback.simulate_stream(alphas, fallback.FallbackPolicy(K, C), K, C, np.random.default_rng(seed))
    assert [to for _, to in trace["switches"]] == ["off", "on"]
    (off_at, _), (on_at, _) = trace["switches"]
    # off: the window (32 rounds) must fill with bad rounds; each emits ~1 token at alpha 0.02
    spec_rounds_after = np.sum((trace["position"] >= n) & (trace["position"] < off_at)
                               & (trace["action"] == "speculate"))
    assert spec_rounds_after <= 32
    # on: a probe every 16 plain tokens, more at once while they accept; a probe at alpha 0.8
    # rejects its first draft 20% of the time, so allow four probe intervals (median is ~20 steps)
    steps_after = np.sum((trace["position"] >= 2 * n) & (trace["position"] < on_at))
    assert 0 < on_at - 2 * n and steps_after <= 4 * 16


@pytest.mark.parametrize("seed", range(3))
def test_policy_is_within_10_percent_of_the_better_baseline_in_each_phase(seed):
    n = 2000
    alphas = np.r_[np.full(n, 0.8), np.full(n, 0.05), np.full(n, 0.8)]
    bounds = [0, n, 2 * n, 3 * n]
    tps = {name: fallback.throughput_by_phase(
        fallback.simulate_stream(alphas, policy, K, C, np.random.default_rng(seed)), bounds)
        for name, policy in [("always", fallback.AlwaysSpeculate()), ("never", fallback.NeverSpeculate()),
                             ("policy", fallback.FallbackPolicy(K, C))]}
    better = np.maximum(tps["always"], tps["never"])
    assert np.all(tps["policy"] >= 0.9 * better)
    assert tps["always"][1] < 0.9 * tps["never"][1]  # the high-temperature phase really is a loss


def test_simulated_rounds_match_the_formula():
    trace = fallback.simulate_stream(np.full(20_000, 0.7), fallback.AlwaysSpeculate(), K, C, np.random.default_rng(1))
    tokens = trace["tokens"]
    se = tokens.std() / np.sqrt(len(tokens))
    assert abs(tokens.mean() - theory.expected_tokens_per_verify(0.7, K)) < 4 * se
    assert np.allclose(trace["seconds"], K * C + 1)
    plain = fallback.simulate_stream(np.full(50, 0.7), fallback.NeverSpeculate(), K, C, np.random.default_rng(1))
    assert plain["tokens"].sum() == 50 and np.allclose(plain["seconds"], 1.0)


def test_throughput_by_phase_attributes_steps_to_their_start():
    trace = {"position": np.array([0, 3, 5, 6]), "tokens": np.array([3, 2, 1, 4]),
             "seconds": np.array([1.0, 1.0, 1.0, 2.0])}
    assert np.allclose(fallback.throughput_by_phase(trace, [0, 5, 10]), [5 / 2, 5 / 3])
    with pytest.raises(ValueError, match="boundaries"):
        fallback.throughput_by_phase(trace, [1, 5])


def test_policy_bad_input():
    with pytest.raises(ValueError, match="k must"):
        fallback.FallbackPolicy(0, C)
    with pytest.raises(ValueError, match="c must"):
        fallback.FallbackPolicy(K, -1.0)
    with pytest.raises(ValueError, match="off_below"):
        fallback.FallbackPolicy(K, C, off_below=1.2, on_above=1.1)
    with pytest.raises(ValueError, match="on_above"):
        fallback.FallbackPolicy(K, C, on_above=np.inf)
    with pytest.raises(ValueError, match="window"):
        fallback.FallbackPolicy(K, C, window=0)
    with pytest.raises(ValueError, match="min_rounds"):
        fallback.FallbackPolicy(K, C, window=8, min_rounds=9)
    policy = fallback.FallbackPolicy(K, C)
    with pytest.raises(ValueError, match="accepted"):
        policy.record(5, 4)
    with pytest.raises(ValueError, match="drafted"):
        policy.record(0, K + 1)
    with pytest.raises(ValueError, match="n must"):
        policy.record_plain(0)
    with pytest.raises(ValueError, match="alphas"):
        fallback.simulate_stream([0.5, 1.5], policy, K, C, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        fallback.simulate_stream([0.5], policy, K, C, 0)


# ----------------------------------------------------------------------------- real models

class Scripted:
    """A policy that follows a fixed script of actions (then speculates)."""

    def __init__(self, actions):
        self.actions, self.switches = list(actions), []

    def action(self):
        return self.actions.pop(0) if self.actions else "speculate"

    def record(self, accepted, drafted):
        pass

    def record_plain(self, n=1):
        pass


def _tiny(seed, n_layer):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=64, block_size=48, n_layer=n_layer, n_head=2, n_embd=32)).eval()


def test_model_stream_interleaving_plain_and_speculative_equals_greedy_decoding():
    target, draft = _tiny(0, 2), _tiny(1, 1)
    prompt = [1, 2, 3, 4, 5]
    n = 60  # longer than the context: exercises the slide-and-refill too
    stream = fallback.ModelStream(target, draft, prompt, k=3, temperature=0.0)
    fallback.drive(Scripted(["plain", "speculate", "plain", "plain", "probe", "speculate", "plain"] * 5),
                   stream.speculate, stream.plain, n)
    # before the context first slides (k + 1 more tokens would not fit) it must equal plain
    # greedy decoding token for token; after the slide it must still run and stay in vocabulary
    first = 48 - len(prompt) - 4
    want, _ = decode.generate(target, prompt, first, temperature=0.0)
    assert stream.new_tokens[:first] == want
    assert len(stream.new_tokens) >= n and all(0 <= t < 64 for t in stream.new_tokens)


def test_model_stream_greedy_draft_at_temperature_is_accepted_with_p_of_its_token():
    # q one-hot: the exact rule accepts x with probability p_T(x); with a draft identical to a
    # sharply peaked target at small T, argmax q = argmax p has p_T ~ 1: every draft is accepted
    target = _tiny(0, 2)
    with torch.no_grad():
        target.wte.weight.mul_(50)
    stream = fallback.ModelStream(target, target, [1, 2, 3], k=4, temperature=0.05, draft_temperature=0.0,
                                  rng=np.random.default_rng(0))
    trace = fallback.drive(fallback.AlwaysSpeculate(), stream.speculate, stream.plain, 30)
    assert np.all(trace["tokens"] == 5)
    with pytest.raises(ValueError, match="draft_temperature"):
        fallback.ModelStream(target, target, [1], k=2, temperature=1.0, draft_temperature=-1.0)


# ----------------------------------------------------------------------------- alpha(T), teacher-forced

def test_acceptance_by_temperature_matches_its_definitions_by_brute_force():
    rng = np.random.default_rng(3)
    n, V = 12, 7
    p_logits, q_logits = rng.normal(size=(n, V)) * 2, rng.normal(size=(n, V)) * 2
    temps = [0.0, 0.5, 1.0, 2.5]
    got = fallback.acceptance_by_temperature(p_logits, q_logits, temps, widths=(1, 3), draft_temperature=0.7)

    def soft(z, t):
        if t == 0:
            return np.eye(V)[np.argmax(z)]
        e = np.exp(z / t - np.max(z / t))
        return e / e.sum()

    for i, t in enumerate(temps):
        for row in range(n):
            p, q = soft(p_logits[row], t), soft(q_logits[row], t)
            ranked = sorted(range(V), key=lambda x: -q_logits[row, x])
            assert got["sampled"][i, row] == pytest.approx(sum(min(p[x], q[x]) for x in range(V)))
            assert got["greedy"][i, row] == pytest.approx(p[ranked[0]])
            assert got["top1"][i, row] == pytest.approx(p[ranked[0]])
            assert got["top3"][i, row] == pytest.approx(sum(p[x] for x in ranked[:3]))
            q_mis = soft(q_logits[row], 0.7)
            assert got["mismatch"][i, row] == pytest.approx(sum(min(p[x], q_mis[x]) for x in range(V)))


def test_acceptance_limits_as_temperature_grows():
    # sampled: both sides flatten to uniform, alpha -> 1; w deterministic candidates: -> w / V
    rng = np.random.default_rng(4)
    p_logits, q_logits = rng.normal(size=(200, 50)) * 3, rng.normal(size=(200, 50)) * 3
    got = fallback.acceptance_by_temperature(p_logits, q_logits, [1.0, 1e4], widths=(5,))
    assert got["sampled"][1].mean() > 0.999 > got["sampled"][0].mean()
    assert got["greedy"][1].mean() == pytest.approx(1 / 50, rel=1e-3)
    assert got["top5"][1].mean() == pytest.approx(5 / 50, rel=1e-3)
    with pytest.raises(ValueError, match="same shape"):
        fallback.acceptance_by_temperature(p_logits, q_logits[:, :10], [1.0])
    with pytest.raises(ValueError, match="temperatures"):
        fallback.acceptance_by_temperature(p_logits, q_logits, [-1.0])
    with pytest.raises(ValueError, match="widths"):
        fallback.acceptance_by_temperature(p_logits, q_logits, [1.0], widths=(51,))


def test_tau_by_position():
    assert fallback.tau_by_position(np.full(50, 0.7), K) == pytest.approx(theory.expected_tokens_per_verify(0.7, K))
    # clustered acceptance (runs of easy tokens) beats the i.i.d. formula at the same mean
    clustered = np.repeat([0.95, 0.15], 40)
    assert fallback.tau_by_position(clustered, K) > theory.expected_tokens_per_verify(clustered.mean(), K)
    with pytest.raises(ValueError, match="beta"):
        fallback.tau_by_position([0.5, 1.5, 0.2, 0.1], 2)


def test_drive_interleaved_equals_separate_runs():
    alphas = np.r_[np.full(300, 0.8), np.full(300, 0.05)]

    def run(seed):
        rng, now = np.random.default_rng(seed), [0.0]

        def speculate(position):
            ok = rng.random(K) < alphas[position]
            now[0] += K * C + 1
            return (int(np.argmin(ok)) if not ok.all() else K), K

        def plain(position):
            now[0] += 1.0

        return speculate, plain, lambda: now[0]

    # separate virtual clocks per run, so interleaving must not change anything
    separate = {}
    for name, seed in (("a", 0), ("b", 1)):
        speculate, plain, clock = run(seed)
        separate[name] = fallback.drive(fallback.FallbackPolicy(K, C), speculate, plain, len(alphas), clock)
    runs = {name: run(seed) for name, seed in (("a", 0), ("b", 1))}
    clocks = {name: r[2] for name, r in runs.items()}
    calls = {name: (fallback.FallbackPolicy(K, C), r[0], r[1]) for name, r in runs.items()}
    # one shared clock would mix the runs' time; give each step its own run's clock via a wrapper
    together = {}
    for name in calls:
        together[name] = fallback.drive_interleaved({name: calls[name]}, len(alphas), clocks[name])[name]
    for name in separate:
        for key in ("position", "tokens", "seconds", "action"):
            assert np.array_equal(separate[name][key], together[name][key])
    both = fallback.drive_interleaved({"x": (fallback.AlwaysSpeculate(), *run(2)[:2]),
                                       "y": (fallback.NeverSpeculate(), *run(3)[:2])}, 50, clock=lambda: 0.0)
    assert both["y"]["tokens"].sum() == 50 and set(both["x"]["action"]) == {"speculate"}


def test_model_stream_requests_restart_from_their_prompt():
    # greedy decoding restarted from a new prompt at position 10 continues exactly like a fresh
    # greedy run from that prompt, whatever mix of plain steps and rounds produced the first part
    target, draft = _tiny(0, 2), _tiny(1, 1)
    first, second = [1, 2, 3], [7, 8, 9, 10]
    stream = fallback.ModelStream(target, draft, first, k=3, temperature=0.0, requests=[(10, second)])
    trace = fallback.drive(Scripted(["speculate", "plain"] * 20), stream.speculate, stream.plain, 20)
    start = int(trace["position"][trace["position"] >= 10][0])  # the first step of the second request
    want, _ = decode.generate(target, second, 20 - start, temperature=0.0)
    assert stream.new_tokens[start : start + len(want)] == want
    with pytest.raises(ValueError, match="request"):
        fallback.ModelStream(target, draft, first, k=2, temperature=0.0, requests=[(5, [])])


def test_alpha_for_speedup_with_a_measured_verify_cost():
    for r in (0.8, 1.0, 1.7):
        a = fallback.alpha_for_speedup(1.0, K, C, r)
        assert theory.expected_tokens_per_verify(a, K) == pytest.approx(K * C + r, abs=1e-9)
    # a costlier verify needs a better draft before speculation pays
    assert fallback.alpha_for_speedup(1.0, K, C, 1.7) > fallback.alpha_for_speedup(1.0, K, C)
    policy = fallback.FallbackPolicy(K, C, r=1.7)
    assert policy.alpha_off == pytest.approx(fallback.alpha_for_speedup(1.0, K, C, 1.7))
    with pytest.raises(ValueError, match="r must"):
        fallback.FallbackPolicy(K, C, r=0.0)
