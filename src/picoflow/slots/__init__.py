"""Slot filling: the model reads what the user just said, code keeps it and decides what comes next.

``SlotStep`` (``step``) is a thin step over a ``Form`` (``form``): the value where a slot-filling
conversation stands. Each turn the model writes a reading of the user's latest message in the
format derived from the step's slots model (``reading``); only what the user's words bear out is
kept (``grounding``, with the words an option needs declared beside it with ``Said``).
"""

from picoflow.slots.form import Ask, Form, Merge, ask
from picoflow.slots.grounding import Said, as_written, bears_out, says_field, says_option, written_days
from picoflow.slots.reading import EXTRACT_RULES, FORMAT_HINT, Extraction, Reading, reading_of
from picoflow.slots.step import FORM_KEY, SlotStep

__all__ = [
    "EXTRACT_RULES",
    "FORMAT_HINT",
    "FORM_KEY",
    "Ask",
    "Extraction",
    "Form",
    "Merge",
    "Reading",
    "Said",
    "SlotStep",
    "as_written",
    "ask",
    "bears_out",
    "reading_of",
    "says_field",
    "says_option",
    "written_days",
]
