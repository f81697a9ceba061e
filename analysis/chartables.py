"""`str.translate` tables filled lazily, one character at a time: the text passes compute a
per-character answer in Python once and then let `str.translate` apply it in C
(analysis/mentions.py, analysis/validity.py)."""

from __future__ import annotations

from collections.abc import Callable

# Entries kept per table: adversarial text (every code point once) cannot grow one forever.
LIMIT = 65536

Entry = str | int | None  # what str.translate reads: replacement text, a code point, or delete


class CharTable(dict[int, Entry]):
    """The entry of a character is `rule(character)`, computed the first time it is looked up
    (the rule must depend on the character only). Past LIMIT entries it is computed again on
    each lookup instead of kept."""

    def __init__(self, rule: Callable[[str], Entry]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, code: int) -> Entry:
        entry = self._rule(chr(code))
        if len(self) < LIMIT:
            self[code] = entry
        return entry
