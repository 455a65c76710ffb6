"""What the chat UI shows under an answer (timing, notice or error) and how streamed tokens are batched."""

from __future__ import annotations

import asyncio

from ui import chat_errors as errors
from ui.answer_view import TokenCoalescer, answer_markdown, notice_markdown, update_interval_s
from ui.timing import NBSP, TIMING_LEGEND, compute_timing

TIMING = compute_timing(0.0, 0.123, 0.824, prompt_tokens=19, completion_tokens=36)


def test_timing_line_sits_under_the_answer_with_its_legend() -> None:
    """An answer is followed by a rule, the ``Total | Prompt | Gen`` line and the legend that explains it."""
    content = answer_markdown("混合专家", TIMING, None, None)
    answer, rule, footer = content.split("\n\n")
    assert (answer, rule) == ("混合专家", "---")
    line, legend = footer.split("  \n")
    assert line.replace(NBSP, " ").startswith("`Total: 824ms | Prompt: 123ms | Gen: 701ms")
    assert legend == f"*{TIMING_LEGEND}*" and "Prompt = time to first token" in legend


def test_clamp_notice_comes_first_where_it_was_streamed() -> None:
    """A max_tokens clamp notice opens the answer (it was streamed before the first token) and stays there."""
    notice = "max_tokens lowered from 5,000 to 4,077"
    content = answer_markdown("a", TIMING, notice, None)
    assert content.startswith(notice_markdown(notice) + "\n\na\n\n---\n\n`Total:")


def test_notice_without_answer_text_is_not_followed_by_a_rule() -> None:
    """A stopped answer that got only its notice shows the notice, then the error, with no rule between."""
    content = answer_markdown("", None, "lowered", errors.cancelled())
    assert content == f"{notice_markdown('lowered')}\n\n{errors.cancelled().message}"


def test_error_without_answer_is_shown_alone() -> None:
    """A failed request shows only the error, no timing."""
    error = errors.stream_cut(partial=False)
    assert answer_markdown("", None, None, error) == error.message


def test_partial_answer_is_kept_above_the_error() -> None:
    """A cut-off answer keeps the part that arrived, then the error."""
    error = errors.cancelled()
    content = answer_markdown("部分", TIMING, None, error)
    assert content == f"部分\n\n---\n\n{error.message}"
    assert "Total:" not in content


def test_answer_colons_survive_markdown() -> None:
    """``Note:this`` in an answer is escaped so the renderer does not swallow ``this``."""
    assert answer_markdown("Note:this", None, None, None) == "Note\\:this"


def test_first_token_is_forwarded_at_once_then_batched() -> None:
    """The first piece goes out immediately; later pieces within the interval are joined into one update."""
    sent: list[str] = []
    now = [0.0]

    async def emit(text: str) -> None:
        sent.append(text)

    async def go() -> TokenCoalescer:
        out = TokenCoalescer(emit, interval_s=lambda chars: 0.05, clock=lambda: now[0])
        await out.push("混")
        now[0] = 0.01
        await out.push("合")
        await out.push("专")
        now[0] = 0.07
        await out.push("家")
        await out.push("")
        now[0] = 0.08
        await out.push("模")
        await out.flush()
        await out.flush()
        return out

    out = asyncio.run(go())
    assert sent == ["混", "合专家", "模"]
    assert out.text == "混合专家模"


def test_update_interval_grows_with_the_answer() -> None:
    """Short answers update every 50 ms; long ones less often, up to once a second."""
    assert update_interval_s(0) == 0.05
    assert update_interval_s(2000) == 0.5
    assert update_interval_s(100_000) == 1.0


def test_blank_answer_is_explained() -> None:
    """An answer with no visible text says so instead of showing an empty bubble."""
    content = answer_markdown(" \n\n ", TIMING, None, None)
    assert content.startswith("*(No visible text")
    assert f"Total:{NBSP}824ms" in content
    assert answer_markdown("\n", None, None, errors.cancelled()) == errors.cancelled().message
