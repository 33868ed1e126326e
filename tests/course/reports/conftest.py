"""The report modules print through ``messages.say``: their tests read the English lines, whatever
language an earlier test in the same worker left set."""
import pytest

from lessonlib.course import messages


@pytest.fixture(autouse=True)
def english():
    before = messages.language()
    messages.use("en")
    yield
    messages.use(before)
