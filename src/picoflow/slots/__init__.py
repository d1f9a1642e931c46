"""Slot filling: the model reads what the user just said, code keeps it and decides what comes next.

``read`` (``reader``) reads the user's latest message into a ``Form`` (``form``): the model writes a
reading in the format derived from the slots model (``reading``); a ``Grounding`` policy of named
rules keeps what the conversation's words bear out and gives a ``Verdict`` for every item
(``grounding``), with the words an option or a field needs declared beside it with ``Said``
(``said``). ``SlotStep`` (``step``) is a thin step over the reader that asks its questions in code.
"""

from picoflow.slots.form import Ask, Form, Merge, ask
from picoflow.slots.grounding import Evidence, Grounding, Item, Rule, Seen, Verdict
from picoflow.slots.reader import Reader, Reading, read
from picoflow.slots.reading import EXTRACT_RULES, FORMAT_HINT, Extraction, reading_of
from picoflow.slots.said import (
    Said,
    as_written,
    bears_out,
    options_said,
    says_field,
    says_option,
    written_days,
)
from picoflow.slots.step import FORM_KEY, SlotStep

__all__ = [
    "EXTRACT_RULES",
    "FORMAT_HINT",
    "FORM_KEY",
    "Ask",
    "Evidence",
    "Extraction",
    "Form",
    "Grounding",
    "Item",
    "Merge",
    "Reader",
    "Reading",
    "Rule",
    "Said",
    "Seen",
    "SlotStep",
    "Verdict",
    "as_written",
    "ask",
    "bears_out",
    "options_said",
    "read",
    "reading_of",
    "says_field",
    "says_option",
    "written_days",
]
