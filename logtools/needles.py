"""The literal searches that find candidate lines for ``--errors`` in raw log bytes (:mod:`logtools.scan` parses
only the lines they find with the full grammar, :mod:`engine.vllmlog.grammar`).

Three searches, each at C speed: the level words (``memchr`` for their ``R``; ``re`` from the ``R`` where ``R`` is
common), the bare error lines' `` error:`` (``bytes.find``) and ``Traceback (most recent`` (``memchr`` for its ``b``;
``bytes.find`` where ``b`` is common). The byte after a ``memchr`` hit is tested before the word around it
(an index costs a tenth of a ``startswith`` call), and a span where the letter was common is remembered for the next
spans of the file (probed again every :data:`REPROBE_SPANS` spans), so that a log full of ``Running:`` stats lines
does not pay :data:`MAX_R_MISSES` misses per span.
"""

from __future__ import annotations

import re

TRACEBACK_NEEDLE = b"Traceback (most recent"
_TRACEBACK_B = TRACEBACK_NEEDLE.index(b"b")
"""Offset of the needle's ``b``: a letter that access and stats lines lack, so ``memchr`` for it skips them."""
_AFTER_B = TRACEBACK_NEEDLE[_TRACEBACK_B + 1]
MAX_B_MISSES = 64
"""``b`` s that are not a traceback after which a span is searched for the whole needle instead."""
LEVEL_WORDS = (b"ERROR", b"WARNING", b"CRITICAL")
"""The level words a problem line has; all have an ``R``, rare in access, stats and INFO lines (``memchr`` for it
skips them), at offset 1, 2 and 1."""
_WORD_AFTER_R = {ord("R"): (b"ERROR", 1), ord("N"): (b"WARNING", 2), ord("I"): (b"CRITICAL", 1)}
"""The level word whose ``R`` is followed by this byte, and that ``R``'s offset in it."""
LEVEL_RE = re.compile(rb"R(?:ROR|NING|ITICAL)")
"""The level words from their ``R`` (one literal first: ``re`` searches for it in C), where ``R`` is common."""
MAX_R_MISSES = 32
"""``R`` s that are not a level word after which a span is searched with :data:`LEVEL_RE` instead."""
REPROBE_SPANS = 8
"""Spans after which a file where a letter was common is searched with ``memchr`` for it again."""
BARE_NEEDLE = b" error:"
"""A literal every error line without a header has (:data:`~engine.vllmlog.grammar.BARE_ERROR_RE`: argparse's
``<prog>: error: …``, ``Fatal Python error: …``), found with ``bytes.find``; searched apart from the level words, as
one ``re`` alternation of all of them loses ``re``'s literal search and scans byte by byte (measured 10x slower).
It ends with ``:``, rarer than the space that ends ``error: ``: ``bytes.find`` (two-way, skipping on the window's
last byte) checks fewer windows, ~40% fewer instructions over a block."""


class Needles:
    """The searches of one scan, with what they learnt about the current file (which letters are common).

    Offsets are into a span's buffer; a span holds whole lines (its last byte is a newline). Call
    :meth:`start_file` before a file's first span and :meth:`start_span` before each span."""

    def __init__(self) -> None:
        self.many_r = False
        """``R`` is common in this file: the level words are searched with :data:`LEVEL_RE`."""
        self.many_b = False
        """``b`` is common in this file: tracebacks are searched with ``bytes.find`` of the whole needle."""
        self._spans_to_probe = REPROBE_SPANS

    def start_file(self) -> None:
        """A new file: both letters are taken to be rare until seen otherwise."""
        self.many_r = self.many_b = False
        self._spans_to_probe = REPROBE_SPANS

    def start_span(self) -> None:
        """A new span: every :data:`REPROBE_SPANS` spans the letters are taken to be rare again."""
        self._spans_to_probe -= 1
        if self._spans_to_probe <= 0:
            self.start_file()

    def next_level(self, buf: bytes, start: int, stop: int) -> int:
        """Offset of the next level word (:data:`LEVEL_WORDS`) in ``buf[start:stop]`` (whole lines), -1 if none:
        ``memchr`` for ``R``, each hit checked for the word its next byte names; where ``R`` is common (more than
        :data:`MAX_R_MISSES` misses, e.g. many stats lines with ``Running:``), the rest of the span is searched
        with :data:`LEVEL_RE`, whose literal-prefix search runs in C."""
        last = stop - 1  # a newline: the byte after a hit before it exists (and -1 would mean the buffer's end)
        if last <= start:
            return -1
        if not self.many_r:
            find, word_after = buf.find, _WORD_AFTER_R.get
            hit = find(b"R", start + 1, last)
            misses = 0
            while hit >= 0:
                word = word_after(buf[hit + 1])
                if word is not None and hit - word[1] >= start and buf.startswith(word[0], hit - word[1]):
                    return hit - word[1]
                misses += 1
                if misses > MAX_R_MISSES:
                    self.many_r = True
                    start = hit
                    break
                hit = find(b"R", hit + 1, last)
            else:
                return -1
        match = LEVEL_RE.search(buf, start + 1, stop)
        return -1 if match is None else match.start() - (2 if match[0] == b"RNING" else 1)

    def next_traceback(self, buf: bytes, start: int, stop: int) -> int:
        """Offset of the next ``Traceback (most recent`` in ``buf[start:stop]`` (whole lines), -1 if none.

        ``bytes.find`` of a 22-byte needle runs at about 2 GB/s, ``memchr`` for one byte several times faster; the
        needle's ``b`` is rare in vLLM logs (access and stats lines have none), so its hits are checked one by one.
        Where ``b`` is common (prompts logged as text), the file falls back to the plain search.
        """
        last = stop - 1  # as in next_level
        if last <= start:
            return -1
        if self.many_b:
            return buf.find(TRACEBACK_NEEDLE, start, stop)
        find = buf.find
        hit = find(b"b", start + _TRACEBACK_B, last)
        misses = 0
        while hit >= 0:
            if buf[hit + 1] == _AFTER_B and buf.startswith(TRACEBACK_NEEDLE, hit - _TRACEBACK_B):
                return hit - _TRACEBACK_B
            misses += 1
            if misses > MAX_B_MISSES:
                self.many_b = True
                return find(TRACEBACK_NEEDLE, hit - _TRACEBACK_B, stop)
            hit = find(b"b", hit + 1, last)
        return -1
