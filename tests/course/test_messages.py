"""The library speaks the student's language: every check line, hint, widget text and exercise
prompt goes through the catalogue (``lessonlib.course.messages``, ``locale/fa/messages.po``).

* run under ``use("fa")``, the checks (correct answers, stubs, the reference, known-wrong answers)
  print and raise no run of three English words outside code, identifiers and values; the same
  scan over the English run finds such runs (the scan has teeth);
* every template the code passes to ``_`` / ``say`` / ``N_`` (an AST scan) has a current Persian
  entry with the same placeholders, and no call hides its sentence from the scan;
* the English is the source: unchanged under ``use("en")``;
* a stored English check line turns into the Persian one (``translate_output``).
"""
import contextlib
import functools
import io
import re
import textwrap

import nbformat
import polib
import pytest

from lessonlib import paths
from lessonlib.core import theory
from lessonlib.course import checks, exercises, message_catalogue, messages, outputs, widgets
from lessonlib.course.checks import framework, wrong
from lessonlib.course.persian import rtl_markdown
from lessonlib.course.rtl import isolate_line, isolate_text
from tests.course.test_checks import copy_of, references, stub_for

# ----------------------------------------------------------------------------- the English-prose scan

WORD_RUN = message_catalogue.PROSE  # three lowercase English words in a row
CODE = [re.compile(r"`[^`\n]*`"),  # backticked code
        re.compile(r"[A-Za-z_][\w.]*(?:\([^()\n]*\)|\[[^\[\]\n]*\])"),  # calls and subscripts: np.where(a, b)
        re.compile(r"\b(?:nan|inf)\b")]  # array values


@functools.cache
def _values_after(template: str) -> re.Pattern:
    """The text a Persian template shows after its last literal: a value (the student's own error)."""
    persian = messages._(template, "fa")
    literal = persian[:persian.rindex("{")].rsplit("}", 1)[-1]
    return re.compile(re.escape(literal) + r".*$", re.M)


def english_runs(text: str) -> list[str]:
    """Runs of three or more lowercase English words in ``text``, outside code, identifiers and
    values (a student's own error message, the gallery's English bug names)."""
    text = _values_after("case {case}: your function raised {error}: {message}").sub("", text)
    for name in message_catalogue.english_names():
        text = text.replace(name, "")
    for pattern in CODE:
        for _round in range(3):  # nested calls: the innermost first
            text = pattern.sub(" ", text)
    return WORD_RUN.findall(text)


def test_the_scan_finds_english_prose_and_skips_code_and_values():
    assert english_runs("✓ تمرین 2a: matches the reference on 5 cases") == ["matches the reference on"]
    assert english_runs("راهنمایی: np.searchsorted(boundaries, position, side='right') و `if x is None`") == []
    assert english_runs("مقدار: [nan nan nan nan]") == []


# ----------------------------------------------------------------------------- running the checks

SLOW = {"1b", "1d", "3c", "4d", "5b"}  # seconds each: only their correct answer, stub and reference run
TOO_SLOW = {"3c", "4d"}  # not even the correct answer (torch training, 5000 tree rounds): one ✓ template each


def _detect_without_names(sampler, rng):
    """A correct 1d detector whose test names are blank: the names are the student's own words."""
    detected, _test, samples = references()["1d"](sampler, rng)
    return detected, "", samples


def _answers(parts):
    """(label, part, function) for every run: correct, the reference, a stub, known-wrong answers."""
    runs = []
    for part in parts:
        correct = _detect_without_names if part == "1d" else copy_of(references()[part])
        runs += [(f"{part} reference", part, references()[part]), (f"{part} stub", part, stub_for(part))]
        runs += [] if part in TOO_SLOW else [(f"{part} correct", part, correct)]
        if part not in SLOW:  # a slow part's failures: the chi-square and policy lines its ✓ line quotes
            runs += [(f"{part} wrong {w.name}", part, w.fn) for w in wrong.entries(part)]
    return runs


def run_all(lang: str, parts) -> dict[str, str]:
    """{label: what the student sees} (printed lines and the CheckFailed message) in ``lang``."""
    before = messages.language()
    messages.use(lang)
    seen = {}
    try:
        for label, part, fn in _answers(parts):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    checks.EXERCISES[part](fn)
                except checks.CheckFailed as err:
                    print(err)
            seen[label] = out.getvalue()
    finally:
        messages.use(before)
    return seen


FAST = [p for p in sorted(checks.EXERCISES) if p not in SLOW]


@pytest.fixture(scope="module")
def persian():
    return run_all("fa", sorted(checks.EXERCISES))


@pytest.fixture(scope="module")
def english():
    return run_all("en", FAST)


def test_every_check_speaks_persian(persian):
    found = {label: english_runs(text) for label, text in persian.items()}
    assert {label: runs for label, runs in found.items() if runs} == {}
    assert all(re.search("[\u0600-\u06ff]", text) for text in persian.values())  # Persian letters in every run


def test_negative_control_the_same_checks_in_english_are_caught(english):
    found = {label: english_runs(text) for label, text in english.items()}
    for part in FAST:  # every part's English shows prose the scan finds
        assert any(runs for label, runs in found.items() if label.startswith(f"{part} ")), part
    assert sum(bool(runs) for runs in found.values()) > 0.9 * len(found)


def test_negative_control_one_untranslated_template_is_caught(monkeypatch):
    table = dict(messages.catalogue("fa"))
    del table["inputs left unmodified"]
    monkeypatch.setattr(messages, "catalogue", lambda lang, locale=messages.LOCALE: table)
    monkeypatch.setattr(messages, "_state", {"lang": "fa"})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.exercise_1a(copy_of(references()["1a"]))
    assert english_runs(out.getvalue()) == ["inputs left unmodified"]


# ----------------------------------------------------------------------------- the stored outputs


def test_a_stored_english_check_line_turns_into_the_persian_one(persian, english):
    for part in FAST:
        for kind in ("correct", "stub", "reference"):
            label = f"{part} {kind}"
            assert outputs.translate_output(english[label], "fa") == persian[label], label


def test_a_stored_failure_turns_into_the_persian_one(persian, english):
    """A failure's first line (what a ✓ line quotes for each negative control it caught) always; the
    whole message mostly (a hint whose text holds " — " stays English: ``outputs._LAST_VALUE``)."""
    failures = [label for label in english if " wrong " in label]
    first = [label for label in failures
             if isolate_line(outputs.translate_line(english[label].splitlines()[0], "fa"))
             == persian[label].splitlines()[0]]
    assert first == failures
    whole = [label for label in failures if outputs.translate_output(english[label], "fa") == persian[label]]
    assert len(whole) > 0.7 * len(failures), sorted(set(failures) - set(whole))


def test_translate_output_of_a_check_line():
    line = "✓ exercise 3d: 'tvd': minimising the mean TV maximises the mean α = 1 − TV on the training text\n"
    assert outputs.translate_output(line, "fa") == isolate_text(
        "✓ تمرین 3d: 'tvd': کمینه کردن میانگین TV، میانگین α = 1 − TV را روی متن آموزشی بیشینه می‌کند\n")
    assert outputs.translate_output(line, "en") == line
    other = "a line no template knows\n"
    assert outputs.translate_output(other, "fa") == other


@pytest.mark.parametrize("spec, value", [(">12", 0.5), ("<12", "draft-kl"), ("12", 7), ("12", "draft-kl"),
                                         ("^12", "ab")])
def test_a_column_is_laid_out_once_for_its_translation(monkeypatch, spec, value):
    """A placeholder padded to a width keeps that width in the translated line: the English padding is
    dropped and the width applied once (a right-aligned column used to get its padding twice)."""
    template = "rate of {name:%s} per pass" % spec
    table = {template: "نرخ {name:%s} در هر گذر" % spec}
    monkeypatch.setattr(messages, "catalogue", lambda lang, locale=messages.LOCALE: table)
    outputs._patterns.cache_clear()
    try:
        persian = ("نرخ {name:%s} در هر گذر" % spec).format(name=value)
        assert outputs.translate_line(template.format(name=value), "fa") == persian
    finally:
        outputs._patterns.cache_clear()


# ----------------------------------------------------------------------------- the catalogue is complete


def test_every_template_has_a_current_persian_entry_with_the_same_placeholders():
    assert message_catalogue.problems("fa") == [] and message_catalogue.pending("fa") == []
    found, _problems = message_catalogue.templates()
    assert len(found) > 300 and "✓ exercise {exercise}: {verified}" in found  # the scan sees the checks


def _package(tmp_path, source: str):
    package = tmp_path / "course"
    package.mkdir()
    (package / "module.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return package


def test_a_template_without_translation_is_pending_not_a_failure(tmp_path):
    """Writing a message never waits for its translation: it prints in English in the Persian
    edition and the check lists it as pending."""
    package = _package(tmp_path, """
        from lessonlib.course.messages import _, say
        print(_("inputs left unmodified"), say("a brand new sentence about {n} rounds", n=3))
    """)
    assert not [line for line in message_catalogue.problems("fa", package) if "module.py" in line]
    assert [line for line in message_catalogue.pending("fa", package) if "module.py" in line] == [
        f"{package / 'module.py'}:3: no current fa translation of 'a brand new sentence about {{n}} rounds'"]
    messages.use("fa")
    try:
        assert messages.say("a brand new sentence about {n} rounds", n=3) == "a brand new sentence about 3 rounds"
    finally:
        messages.use("en")


def test_negative_control_a_call_the_scan_cannot_read_fails(tmp_path):
    package = _package(tmp_path, """
        from lessonlib.course import messages
        from lessonlib.course.messages import N_, _, say
        HINT = "built elsewhere"
        print(_(HINT), say(f"{3} rounds"), messages.say("x" + "y"), N_())
    """)
    trouble = [line.split(": ", 1)[1] for line in message_catalogue.problems("fa", package) if "module.py" in line]
    assert trouble == ["_(...) needs a string literal as its first argument, got HINT",
                       "say(...) needs a string literal as its first argument, got f'{3} rounds'",
                       "say(...) needs a string literal as its first argument, got 'x' + 'y'",
                       "N_(...) needs a string literal as its first argument, got nothing"]


def test_negative_control_other_placeholders_in_the_persian_fail(tmp_path):
    package = _package(tmp_path, """
        from lessonlib.course.messages import say
        say("{n} of {total} rounds", n=1, total=2)
        say("case {case!r}", case=1)
    """)
    locale = tmp_path / "locale"
    (locale / "fa").mkdir(parents=True)
    po = polib.POFile()
    po.append(polib.POEntry(msgid="{n} of {total} rounds", msgstr="{n} دور"))
    po.save(str(locale / "fa" / "messages.po"))
    trouble = [line.split(": ", 1)[1] for line in message_catalogue.problems("fa", package, locale)
               if "module.py" in line]
    assert trouble == ["'case {case!r}' placeholder {case!r} is not a plain name",
                       "the fa translation of '{n} of {total} rounds' has placeholders ['n'], the English "
                       "['n', 'total']"]


def test_merge_keeps_translations_adds_new_templates_and_retires_old_ones(tmp_path):
    path = tmp_path / "fa" / "messages.po"
    path.parent.mkdir()
    old = polib.POFile()
    old.append(polib.POEntry(msgid="kept", msgstr="نگه‌داشته"))
    old.append(polib.POEntry(msgid="gone", msgstr="رفته"))
    old.save(str(path))
    po = message_catalogue.merge({"kept": ["a.py:1"], "new {n}": ["b.py:2"]}, path)
    entries = {e.msgid: (e.msgstr, e.obsolete) for e in po}
    assert entries == {"kept": ("نگه‌داشته", False), "new {n}": ("", False), "gone": ("رفته", True)}


def test_no_prose_literal_escapes_the_markers():
    """A sentence written as a bare literal (not in _ / say / N_) would print in English: the
    checks and widgets hold none but the course author's error for a broken check."""
    allowed = {"the check failed to catch the negative control ", "; the check is broken"}
    files = sorted((paths.ROOT / "lessonlib/course/checks").glob("*.py")) + [paths.ROOT / "lessonlib/course/widgets.py"]
    bare = [text for path in files for text in message_catalogue.bare_prose(path.read_text(encoding="utf-8"))]
    assert set(bare) == allowed


def test_negative_control_a_bare_prose_literal_is_found():
    assert message_catalogue.bare_prose('fail(case, "your function returned None")\n') == [
        "your function returned None"]
    assert message_catalogue.bare_prose('fail(case, _("your function returned None"))\n') == []


# ----------------------------------------------------------------------------- the English is the source


def test_english_output_is_unchanged(capsys):
    assert checks.exercise_2a(copy_of(theory.expected_tokens_per_verify)) is not None
    assert capsys.readouterr().out == (
        "✓ exercise 2a: E(0.8, 4) = 3.3616\n    matches (1 − α^(K+1))/(1 − α) on 77 (α, K) pairs to 1e-06 relative, "
        "including α = 0 (1 token), α = 0.995 and 0.999, and α = 1 (K + 1 tokens)\n    vectorised over an array of α\n")
    with pytest.raises(checks.CheckFailed) as err:
        framework.expect_close("random p and q (vocab 8)", [0.5, 0.5], [0.25, 0.75], hint=checks.ex1.RESIDUAL)
    assert str(err.value) == (
        "case 'random p and q (vocab 8)': values differ (largest difference 0.25, tolerance 1e-10)\n"
        "  expected: [0.25 0.75]\n  got:      [0.5 0.5]\n"
        "  hint: residual = max(p - q, 0) / sum(max(p - q, 0)): subtract the whole q vector, then normalise")
    checks.exercise_2c(stub_for("2c"))
    assert capsys.readouterr().out == (
        "… exercise 2c: not implemented yet — the function above still raises NotImplementedError; using the "
        "reference lessonlib.core.theory.expected_speedup so the rest of the notebook runs.\n")
    assert widgets.safe_call(stub_for("2c"))[1] == "not implemented yet (exercise 2c: to do)"


def test_the_same_failure_in_persian(monkeypatch):
    monkeypatch.setattr(messages, "_state", {"lang": "fa"})
    with pytest.raises(checks.CheckFailed) as err:
        framework.expect_close("random p and q (vocab 8)", [0.5, 0.5], [0.25, 0.75], hint=checks.ex1.RESIDUAL)
    assert str(err.value) == isolate_text(
        "مورد 'p و q تصادفی (واژگان 8)': مقدارها فرق دارند (بیشترین اختلاف 0.25، رواداری 1e-10)\n"
        "  مورد انتظار: [0.25 0.75]\n  خروجی شما:  [0.5 0.5]\n"
        "  راهنمایی: residual = max(p - q, 0) / sum(max(p - q, 0)): کل بردار q را کم کنید، بعد نرمال کنید")
    assert checks.ex1.RESIDUAL.startswith("residual = max")  # the constant itself stays the English template


def test_an_unknown_language_is_a_value_error_naming_lang():
    with pytest.raises(ValueError, match="^lang must be one of en, fa, got 'xx'$"):
        messages.use("xx")
    assert messages.language() == "en"
    with pytest.raises(ValueError, match="lang"):
        messages.say("case {case}: {problem}", "xx", case="a", problem="b")


# ----------------------------------------------------------------------------- widgets and the exercise prompt


def test_widgets_speak_persian(monkeypatch):
    summary = widgets.speedup_summary(0.8, 4, 0.05, theory.expected_tokens_per_verify, theory.expected_speedup,
                                      theory.optimal_k)
    report = {"rows": [{"method": "eagle tree", "tau": 3.1, "speedup": 1.8, "mean_nodes": 9.0,
                        "draft_cost_per_round": 0.4, "acceptance_by_depth": [0.7, None]},
                       {"method": "draft chain", "tau": 2.2, "speedup": 1.3, "alpha": 0.6, "c": 0.1}],
              "verify_cost": [{"new_tokens": 10, "tree_vs_one_token": 1.2}]}
    shown = lambda: [widgets.speedup_text(summary), widgets.speedup_text(dict(summary, error="boom")),  # noqa: E731
                     widgets.tree_summary(report, "eagle tree"), widgets.tree_summary(report, "draft chain"),
                     widgets.safe_call(stub_for("2c"))[1]]
    english = shown()
    assert [bool(english_runs(text)) for text in english] == [True, False, True, True, True]  # the scan sees them
    assert "cannot compute" in english[1]  # two English words: below the scan's three, translated all the same
    monkeypatch.setattr(messages, "_state", {"lang": "fa"})
    persian = shown()
    assert [english_runs(text) for text in persian] == [[], [], [], [], []]
    assert "cannot compute" not in persian[1] and "not implemented" not in persian[4]
    assert "3.36" in persian[0] and "eagle tree" in persian[2]  # values and names stay as they are


def test_the_persian_exercise_prompt_comes_from_the_catalogue():
    pointer = exercises.answer_pointer("fa/01_exact_rule.ipynb")
    assert pointer == rtl_markdown(
        "*پیش‌بینی خودتان را بنویسید، سپس با خروجی بالا مقایسه کنید.* پاسخ در "
        "[`solutions/fa/01_exact_rule.ipynb`](../../solutions/fa/01_exact_rule.ipynb) است: سلولی که "
        "درست بعد از سلول کدِ این پرسش می‌آید.")
    assert exercises.ANSWER_PLACEHOLDER_FA == messages._(exercises.ANSWER_PLACEHOLDER, "fa") != \
        exercises.ANSWER_PLACEHOLDER
    nb = nbformat.read(paths.ROOT / "exercises/fa/01_exact_rule.ipynb", as_version=4)
    prompts = [cell.source for cell in nb.cells if exercises.ANSWER_TAG in cell.metadata.get("tags", [])]
    assert prompts and all(source == pointer for source in prompts)
    assert english_runs(pointer) == [] and english_runs(exercises.answer_pointer("01_exact_rule.ipynb"))


def test_quoted_keeps_the_zero_width_non_joiner(monkeypatch):
    assert framework.quoted("kind='ce', T=1") == repr("kind='ce', T=1")
    monkeypatch.setattr(messages, "_state", {"lang": "fa"})
    assert framework.quoted("number of tokens per round") == "'تعداد توکن\u200cهای هر دور'"
    assert "\\u200c" not in framework.quoted("number of tokens per round")


def test_a_stub_message_is_shown_in_persian_and_its_code_stays_english(monkeypatch):
    """A Persian exercise has its English notebook's code cells (the stub's message too); the widget
    that shows the message of a stub the student has not replaced shows it in Persian."""
    message = "exercise 2c: plain decoding costs 1 per token; divide that by the wall time per token"
    assert message in exercises.solution_messages()  # a template of the catalogue, found in the solutions
    source = f"def f():\n    ### BEGIN SOLUTION {message}\n    return 1\n    ### END SOLUTION"
    assert exercises.strip_solution(source) == f'def f():\n    raise NotImplementedError("{message}")'

    def stub():
        raise NotImplementedError(message)
    english = widgets.safe_call(stub)[1]
    monkeypatch.setattr(messages, "_state", {"lang": "fa"})
    persian = widgets.safe_call(stub)[1]
    assert english_runs(english) and english_runs(persian) == []  # negative control: the English is found
    assert persian == isolate_line("هنوز پیاده‌سازی نشده (تمرین 2c: دیکودینگ ساده برای هر توکن 1 هزینه دارد؛ آن را "
                                   "بر زمان واقعی هر توکن تقسیم کنید)")
    unknown = widgets.safe_call(stub_for("2c"))[1]
    assert unknown == isolate_line("هنوز پیاده‌سازی نشده (exercise 2c: to do)")  # an unknown message: as it is


def test_negative_control_a_throwaway_underscore_beside_a_translation_is_found():
    source = textwrap.dedent("""
        from lessonlib.course.messages import _
        def render(curve):
            ks, values, _ = curve()
            return _("best K")
    """)
    assert message_catalogue.scan_source(source, "widget.py")[1] == [
        "widget.py:4: render() binds _ and calls _(...) for a translation: name the throwaway otherwise"]
    assert message_catalogue.scan_source(source.replace("values, _ =", "values, _error ="), "widget.py")[1] == []
