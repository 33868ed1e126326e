"""Printed Persian lines in reading order (``rtl.isolate_line``): what is isolated, and where it is applied.

The browser test (tests/test_browser.py, ``check_output_order``) measures where the glyphs land in
JupyterLab; these tests pin the text itself: each value one left-to-right isolate, the line one
right-to-left isolate, nothing else changed, the same text whether printed live or translated from a
stored English output.
"""
import re

import pytest

from lessonlib.course import llm_demo, messages, outputs
from lessonlib.course.rtl import LRI, PDI, RLI, isolate_line, isolate_text, strip_isolates

LINES = [
    "✓ تمرین 1a: رواداری 1.92252e-12، مقدار [0. 1. 0.5]",
    "✓ تمرین 3d: 'tvd': کمینه کردن میانگین TV، میانگین α = 1 − TV",
    "  راهنمایی: -0.5 است و سرعت 1.60× [1.50, 1.70] است.",
    "تجمیعی 0.624 (202 draft داوری‌شده) و got array([1., 0.]) بود",
    "(K = 2 برای) و نیاکان گرهٔ 4: [0, 1, 2, 3]))",
    "مورد 'p و q تصادفی (واژگان 8)': مقدارها فرق دارند",
    "مورد انتظار: [0.2518 0.0068 0.1751 0.     0.4463 0.    ]",  # numpy pads the last "0." to the column
    "  خروجی شما:  [0.     0.592  0.0233]",  # a label padded after its colon: a line, not a table row
]
RUN = re.compile(f"{LRI}([^{LRI}{PDI}]*){PDI}")


def runs(line: str) -> list[str]:
    return RUN.findall(line)


@pytest.mark.parametrize("line", LINES)
def test_isolating_changes_only_the_layout_and_is_idempotent(line):
    once = isolate_line(line)
    assert strip_isolates(once) == line and isolate_line(once) == once
    assert once.lstrip(" ").startswith(RLI) and once.endswith(PDI)


@pytest.mark.parametrize("line", LINES)
def test_every_isolated_run_has_its_brackets_and_quotes_whole(line):
    for run in runs(isolate_line(line)):
        assert run.strip() == run and run  # no run starts or ends with a space
        for a, b in ("()", "[]", "{}"):
            assert run.count(a) == run.count(b), run
        assert run.count("'") % 2 == 0, run


def test_each_value_the_review_found_broken_is_one_isolate():
    got = runs(isolate_line(LINES[0])) + runs(isolate_line(LINES[1])) + runs(isolate_line(LINES[2]))
    for value in ("1a", "1.92252e-12", "[0. 1. 0.5]", "3d: 'tvd'", "-0.5", "1.60× [1.50, 1.70]", "α = 1 − TV"):
        assert value in got, (value, got)
    # a failing check's expected array, whose last element numpy prints "0." padded to its column
    assert runs(isolate_line(LINES[6])) == ["[0.2518 0.0068 0.1751 0.     0.4463 0.    ]"]
    # a bracket whose partner is in the Persian text stays outside the run (it is the Persian text's)
    assert runs(isolate_line(LINES[3]))[:2] == ["0.624", "202 draft"]


def test_lines_without_a_right_to_left_letter_and_table_rows():
    assert isolate_line("plain decoding 62.6 tokens/s [0.5, 0.7]") == "plain decoding 62.6 tokens/s [0.5, 0.7]"
    row = "K    τ    سرعت"  # columns padded apart read left to right: values isolated, no RLI
    assert isolate_line(row) == f"{LRI}K    τ{PDI}    سرعت"
    assert isolate_text("الف 1\n\nب 2\n") == f"{RLI}الف {LRI}1{PDI}{PDI}\n\n{RLI}ب {LRI}2{PDI}{PDI}\n"


def test_say_and_a_stored_translation_lay_out_the_same_line(monkeypatch):
    template = "✓ exercise {exercise}: {verified}"
    english = messages.say(template, "en", exercise="1a", verified="x")
    assert RLI not in english and LRI not in english  # English is printed as it is
    persian = messages.say(template, "fa", exercise="1a", verified="x")
    assert persian == isolate_line(persian) and persian.startswith(RLI)
    assert outputs.translate_output(english + "\n", "fa") == persian + "\n"
    assert messages.printed("a composed line", "en") == "a composed line"
    assert messages.printed("یک خط 1a", "fa") == isolate_line("یک خط 1a")


def test_a_fenced_reply_is_kept_verbatim_by_the_persian_build():
    code = "    return parse_tree(source, filename"
    assert outputs.translate_output(code + "\n", "fa") != code + "\n"  # negative control: a template reads it
    fenced = f"```python\n{code}\n```\nplain decoding 62.6 tokens/s\n"
    out = outputs.translate_output(fenced, "fa").splitlines()
    assert out[:3] == ["```python", code, "```"]
    unclosed = f"```python\n{code}\n"  # a cut reply leaves its fence open: still verbatim to the end
    assert outputs.translate_output(unclosed, "fa") == unclosed


def test_a_reply_excerpt_is_cut_at_a_line_end_and_closes_its_fence():
    reply = "```python\n" + "".join(f"x{i} = {i}\n" for i in range(200)) + "```\n"
    short = llm_demo.excerpt(reply, 60)
    assert short.endswith(" …\n```") and len(short) <= 60 + 6
    assert short.count("```") == 2 and short.startswith("```python\nx0 = 0\n")
    assert llm_demo.excerpt("a short reply") == "a short reply"
    with pytest.raises(ValueError, match="limit must be a positive"):
        llm_demo.excerpt(reply, 0)
