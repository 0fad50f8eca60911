"""A run's output text as it grows: each step decodes a short window at the end of the output, not all of it.

A tokenizer's decode is not the concatenation of its tokens' texts: a character may span several byte tokens, a
decoder may strip the space that starts its first word, or clean up a space before punctuation. So a new token's
text depends on the tokens before it. As vLLM's incremental detokenizer does, the text is kept in two parts: the
stable text of `tokens[:read]`, decoded once and never again, and the window `tokens[prefix:]`, decoded at every
step. The window's first tokens, `tokens[prefix:read]` (the ones the previous step made stable), are context: the
window's text past their text is what the new tokens add. A window that ends inside a character (U+FFFD, the
replacement character, at its end) is shown as it decodes and stays the window until its character is whole. A
window whose context no longer decodes as before (a decoder that does not work locally) falls back on decoding the
whole output once; `finish` decodes the whole output at the end of a run, so a finished run's text is the full
decode. Each step costs the tokens it adds and the previous step's, whatever the output's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

INCOMPLETE = "\ufffd"  # what a decoder gives for the bytes of a character not yet whole


class OutputText:
    """The text of a growing list of tokens, and where a stop string first cuts it.

    decode: the tokenizer's decode of a list of token ids (goose.target.Target.text).
    stops: stop strings; the text is cut before the first one (each in turn, as the loop always did) and
    `stopped` turns True."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str] = ()) -> None:
        self._decode = decode
        self.stops = tuple(stops)
        self.tokens: list[int] = []
        self.text = ""  # the output's text so far, cut before a stop string
        self.stopped = False
        self._stable = ""  # the text of tokens[:read], final
        self._prefix = 0  # the window's context starts here...
        self._read = 0  # ...and its new tokens here
        self._searched = 0  # no stop string starts in the text before this, unless it reaches past it

    def extend(self, tokens: Sequence[int]) -> bool:
        """Append tokens and decode what they add; True when a stop string now cuts the text."""
        self.tokens.extend(tokens)
        self._searched = len(self._stable)  # the last step searched a text that began with the stable text
        context = self._decode(self.tokens[self._prefix:self._read]) if self._read > self._prefix else ""
        window = self._decode(self.tokens[self._prefix:])
        if not window.startswith(context):  # the context decodes differently now: decode the whole output instead
            self._stable, self._prefix, self._read, self._searched = "", 0, 0, 0
            context, window = "", self._decode(self.tokens)
        added = window[len(context):]
        if not window.endswith(INCOMPLETE):
            self._stable, added = self._stable + added, ""
            self._prefix, self._read = self._read, len(self.tokens)
        return self._cut(self._stable + added)

    def finish(self) -> str:
        """The whole output decoded once (a finished run's text is the full decode, whatever the tokenizer), cut
        before its first stop string."""
        self._searched = 0
        self._cut(self._decode(self.tokens))
        return self.text

    def _cut(self, text: str) -> bool:
        """`text`, cut before each stop string in turn, becomes the text. A stop string that starts before the text
        already searched and ends inside it would have been found there."""
        for stop in self.stops:
            cut = text.find(stop, max(0, self._searched - len(stop) + 1))
            if cut >= 0:
                text, self.stopped = text[:cut], True
        self.text = text
        return self.stopped
