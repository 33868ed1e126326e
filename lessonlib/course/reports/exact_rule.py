"""Notebook 01's report plumbing (``solutions/01_exact_rule.ipynb``): none today.

The notebook's cells are the lesson itself: the residual, the verification round, the exact law of
the first emitted token under the correct and the buggy replacement rules, and the tests that tell
them apart. None of them holds table formatting or row-picking that belongs in a library module,
so this module is empty; plumbing that notebook 01 grows later (a stored report's rows, a table's
formatting) goes here, with its test beside the other report modules' tests.
"""
from __future__ import annotations
