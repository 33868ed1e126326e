"""Exercise 5b's hints: why the reference fallback policy acts differently from the student's at the
first step where they part (``_diagnose``), and the history shown beside it."""
from __future__ import annotations

from lessonlib.course.messages import _, say


def _alpha(rounds):
    judged = sum(a + r for a, r in rounds)
    return sum(a for a, _ in rounds) / judged if judged else float("nan")


def _history(events, last=6) -> str:
    """The last few steps, runs of plain steps merged: '16 × plain, probe accepted 4, …'."""
    runs = []
    for act, accepted in events:
        text = act if accepted is None else (say("probe accepted {n}", n=accepted) if act == "probe" else
                                             say("speculate accepted {n}", n=accepted))
        if runs and runs[-1][0] == text:
            runs[-1][1] += 1
        else:
            runs.append([text, 1])
    shown = [text if n == 1 else f"{n} × {text}" for text, n in runs[-last:]]
    return ("… " if len(runs) > last else "") + ", ".join(shown)


def _why_on(ref, before, just_switched):
    """Hint when the reference speculates and the student's policy does not."""
    window, pw = ref.rounds.maxlen, ref.probe_window
    if just_switched == "on":
        return say("the last {pw} probes give α̂ = {alpha:.3f} ≥ α_on = {alpha_on:.3f}: switch "
                   "speculation back on. Judge the last probe_window probes only (the window holds nothing but probes "
                   "since it was emptied at the switch-off)", pw=pw, alpha=_alpha(list(before)[-pw:]),
                   alpha_on=ref.alpha_on)
    n, alpha = len(before), _alpha(before)
    if n < window:
        if ref.switches and ref.switches[-1][1] == "on":
            return say("your policy switched off with {n} of {window} rounds in the window: switch off only once it "
                       "is full — after switching on, the window holds just the probe_window probes that justified "
                       "it and fills up from there", n=n, window=window)
        return say("your policy switched off with {n} of {window} rounds in the window: switch off only once it is "
                   "full", n=n, window=window)
    estimate = _("α̂ = Σaccepted / (Σaccepted + Σrejected), a rejection counted only when accepted < drafted "
                 "(fallback.alpha_mle), not accepted / drafted")
    if alpha < ref.alpha_on:
        return say("α̂ over the window is {alpha:.3f}, between α_off = {alpha_off:.3f} and α_on = {alpha_on:.3f}: "
                   "keep speculating — switch off only below α_off (hysteresis); and {estimate}", alpha=alpha,
                   alpha_off=ref.alpha_off, alpha_on=ref.alpha_on, estimate=estimate)
    return say("α̂ over the window is {alpha:.3f}, above α_on = {alpha_on:.3f}: keep speculating. Estimate {estimate}",
               alpha=alpha, alpha_on=ref.alpha_on, estimate=estimate)


def _why_off(ref, before, just_switched, since_on):
    """Hint when the student's policy speculates and the reference does not."""
    window, pw = ref.rounds.maxlen, ref.probe_window
    if just_switched == "off":
        off = say("the window (the last {window} rounds: older ones drop out) is full and α̂ = {alpha:.3f} < "
                  "α_off = {alpha_off:.3f}: switch speculation off (and empty the window)", window=window,
                  alpha=_alpha(before), alpha_off=ref.alpha_off)
        if since_on is not None and since_on < window:
            return off + say(" — after the switch-on the window held the last {pw} probes, so it is full again after "
                             "{rounds} rounds", pw=pw, rounds=window - pw)
        return off
    probes = list(ref.rounds)
    if len(probes) < pw:
        return say("only {n} probes since the switch-off: switch on only when the last probe_window = {pw} "
                   "probes give α̂ ≥ α_on — empty the window when switching off, so older rounds do not count",
                   n=len(probes), pw=pw)
    recent = _alpha(probes[-pw:])
    stay = say("the last {pw} probes give α̂ = {alpha:.3f} < α_on = {alpha_on:.3f}: stay off", pw=pw, alpha=recent,
               alpha_on=ref.alpha_on)
    return stay + _(" (it is above α_off, but only α_on switches back on: hysteresis)") if recent >= ref.alpha_off \
        else stay


def _why_probe(ref, events, want, just_switched):
    """Hint when both are off but disagree on probing now."""
    act, accepted = events[-1] if events else ("speculate", None)
    if want == "probe":
        if act == "probe" and accepted:
            return say("the last probe accepted {n}: probe again right away (plain_since_probe = probe_every)",
                       n=accepted)
        return say("{n} plain tokens since the last probe or switch-off: probe now (count plain tokens "
                   "in record_plain; probe when plain_since_probe >= probe_every)", n=ref.probe_every)
    if act == "probe" and not accepted:
        return _("the last probe accepted nothing: wait probe_every plain tokens before the next "
                 "(plain_since_probe = 0)")
    if just_switched == "off":
        return _("after switching off, the first probe comes after probe_every plain tokens: set "
                 "plain_since_probe = 0")
    return _("probe only after probe_every plain tokens since the last probe")


def _diagnose(ref, events, before, want, got, just_switched, since_on):
    if got not in ("speculate", "probe", "plain"):
        return _("action() must return 'speculate', 'probe' or 'plain'")
    if want == "speculate":
        return _why_on(ref, before, just_switched)
    if got == "speculate":
        return _why_off(ref, before, just_switched, since_on)
    return _why_probe(ref, events, want, just_switched)
