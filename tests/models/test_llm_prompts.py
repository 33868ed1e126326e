"""The real LLM's prompt sets (``models.llm_prompts``): built offline from held-out documents,
the same on every call, and refused by name when asked for what they do not hold."""
import pytest

from lessonlib.models import data, llm_prompts


def test_edit_prompts_quote_held_out_functions_and_chat_prompts_quote_nothing():
    edits = llm_prompts.messages("edit", 6)
    assert edits == llm_prompts.messages("edit", 6)  # deterministic
    names = {name for name, _ in llm_prompts._functions()}
    assert all(data.is_heldout(name.rsplit(":", 1)[0]) for name in names)
    for (message,), (_, source) in zip(edits, llm_prompts._functions()[:: max(1, len(names) // 6)]):
        assert message["role"] == "user" and source in message["content"]  # the whole function, quoted
    assert len({m[0]["content"] for m in edits}) == 6
    chats = llm_prompts.messages("chat", 5)
    assert all("```" not in m[0]["content"] for m in chats)


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="kind must be one of edit, chat, got 'code'"):
        llm_prompts.messages("code", 5)
    with pytest.raises(ValueError, match="n must be at most 8 for the chat set"):
        llm_prompts.messages("chat", 9)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            llm_prompts.messages("edit", bad)
