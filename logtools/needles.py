"""The literal searches (at C speed) that find candidate lines for ``--errors`` in raw log bytes: the level words
(``memchr`` for their rare ``R``), `` error:`` and ``Traceback (most recent`` (``memchr`` for its ``b``); where the
letter is common in a file, a plain search instead, probed again every :data:`REPROBE_SPANS` spans."""

from __future__ import annotations

import re

TRACEBACK_NEEDLE = b"Traceback (most recent"
_TRACEBACK_B = TRACEBACK_NEEDLE.index(b"b")  # access and stats lines lack a ``b``
_AFTER_B = TRACEBACK_NEEDLE[_TRACEBACK_B + 1]
MAX_B_MISSES = 64
"""``b`` s that are not a traceback after which a span is searched for the whole needle instead."""
LEVEL_WORDS = (b"ERROR", b"WARNING", b"CRITICAL")
"""The level words a problem line has; their ``R`` (offset 1, 2, 1) is rare in access, stats and INFO lines."""
_WORD_AFTER_R = {ord("R"): (b"ERROR", 1), ord("N"): (b"WARNING", 2), ord("I"): (b"CRITICAL", 1)}
LEVEL_RE = re.compile(rb"R(?:ROR|NING|ITICAL)")  # where ``R`` is common: ``re``'s literal search runs in C
MAX_R_MISSES = 32
"""``R`` s that are not a level word after which a span is searched with :data:`LEVEL_RE` instead."""
REPROBE_SPANS = 8
BARE_NEEDLE = b" error:"
"""A literal of every error line without a header (:data:`~engine.vllmlog.grammar.BARE_ERROR_RE`), searched apart
from the level words (one ``re`` alternation of all was 10x slower); its ``:`` makes ``bytes.find`` ~40% cheaper."""


class Needles:
    """The searches of one scan and which letters are common in the current file; spans hold whole lines. Call
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
        """Offset of the next level word in ``buf[start:stop]``, -1 if none: ``memchr`` for ``R``, each hit checked
        by its next byte; past :data:`MAX_R_MISSES` misses the rest with :data:`LEVEL_RE`."""
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
        """Offset of the next ``Traceback (most recent`` in ``buf[start:stop]``, -1 if none: ``memchr`` for its rare
        ``b`` (several times faster than ``bytes.find``'s ~2 GB/s), the plain search where ``b`` is common."""
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
