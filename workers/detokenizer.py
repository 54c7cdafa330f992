"""Incremental detokenization and stop strings: cost per step proportional to the new tokens, not the output.

Decodes a small window (the tokens since the previous emission plus the ones before them, for correct
spacing) and emits its new suffix; text that ends in an incomplete UTF-8 character is held back.
"""
from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, stop: list[str], skip_ids: frozenset[int]) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.max_stop = max((len(s) for s in stop), default=0)
        self.skip_ids = skip_ids
        self.ids: list[int] = []
        self.text = ""
        self._prefix = 0  # window start
        self._read = 0  # tokens already turned into text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_ids: list[int]) -> bool:
        """Add tokens; returns True when a stop string appeared (the text is then cut before it)."""
        self.ids.extend(t for t in token_ids if t not in self.skip_ids)
        before = self._decode(self.ids[self._prefix:self._read])
        window = self._decode(self.ids[self._prefix:])
        if len(window) <= len(before) or window.endswith("\ufffd"):
            return False
        start = max(0, len(self.text) - self.max_stop + 1)
        self.text += window[len(before):]
        self._prefix, self._read = self._read, len(self.ids)
        for s in self.stop:
            i = self.text.find(s, start)
            if i >= 0:
                self.text = self.text[:i]
                return True
        return False
