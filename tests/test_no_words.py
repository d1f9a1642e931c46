"""picoflow holds no word of any natural language to match what users write: every word grounding
looks for is declared by the application (``Said`` beside its slots model, a ``Catalog`` for its
replies), and numbers, months and date orders come from library data (CLDR through Babel, text2num).

The check reads the framework's source: no ``Said(...)`` is declared in it, and no collection of
lowercase words (the shape of a word list: ``("yes", "ok", "sure")``) stands in the modules that
read users' words, but for the few collections of code names listed here, each with what it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "picoflow"

READERS = [
    *sorted((SOURCE / "slots").glob("*.py")),
    SOURCE / "locale.py",
    SOURCE / "_run" / "arguments.py",
]
"""The modules that compare what a user wrote with something."""

CODE_NAMES = {
    frozenset({"day", "month", "year"}): "the parts of a date a field may hold (Said(date=...))",
    frozenset({"kept", "dropped", "repaired"}): "a verdict's actions",
    frozenset({"user", "assistant"}): "whose message evidence comes from",
    frozenset({"small", "default"}): "the grounding profiles a model asks for",
    frozenset({"dmy", "mdy", "ymd"}): "the orders of a date written in digits",
    frozenset({"short", "medium", "long", "full"}): "CLDR's date widths",
    frozenset({"and", "or"}): "CLDR's list styles (format_list)",
    frozenset({"percent", "number"}): "a catalog placeholder's number formats",
    frozenset({"field", "value", "action", "rule"}): "the keys of a verdict's JSON",
    frozenset({"field", "quote", "value"}): "the keys of a reading's item",
    frozenset({"known", "declined", "asking", "introduced"}): "a stored form's keys",
    frozenset({"corrections", "heard", "rereading"}): "keys of forms stored by earlier versions",
    frozenset({"words", "yes", "no", "named"}): "Said's parameters",
    frozenset({"slips", "second_look", "told", "arguments"}): "a grounding profile's rescues",
    frozenset({"slots", "declined", "asking", "introduced"}): "the state keys of SlotSteps before Form",
    frozenset({"wide", "abbreviated"}): "CLDR's widths of month names",
}


def _word_lists(path: Path) -> list[tuple[int, list[str]]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            texts = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            # Words of two letters or more: a single letter is a pattern's or a format's code.
            words = [text for text in texts if text.isalpha() and text.islower() and len(text) > 1]
            if len(words) >= 2 and len(words) == len(node.elts):
                found.append((node.lineno, words))
    return found


def test_the_modules_that_read_users_words_hold_no_word_list() -> None:
    lists = {
        f"{path.relative_to(SOURCE)}:{line}": words
        for path in READERS
        for line, words in _word_lists(path)
        if frozenset(words) not in CODE_NAMES and not any(frozenset(words) <= names for names in CODE_NAMES)
    }
    assert lists == {}


def test_no_said_is_declared_in_the_framework() -> None:
    declared = [
        f"{path.relative_to(SOURCE)}:{node.lineno}"
        for path in sorted(SOURCE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Said"
    ]
    assert declared == []


def test_the_check_finds_a_word_list(tmp_path: Path) -> None:
    # The check itself: a module with a list of words is caught, a list of code names is not.
    module = tmp_path / "reader.py"
    module.write_text('YES = ("yes", "sure", "ok")\nPARTS = ("day", "month")\n', encoding="utf-8")
    assert _word_lists(module) == [(1, ["yes", "sure", "ok"]), (2, ["day", "month"])]
    assert frozenset({"day", "month"}) <= frozenset({"day", "month", "year"})
