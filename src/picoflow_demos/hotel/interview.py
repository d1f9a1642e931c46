"""Which of Explore's questions the guest has answered, read from the conversation in code.

A small model loses track of a six-question interview: it asks for the room type again after
the guest gave it. The conversation says what was answered (a question asked, then a reply; or
the guest volunteering it), so code can send such a reply back once, naming the question to ask,
and ask it itself if the model still does not.

The check runs on the reply rather than steering through the prompt: a prompt that changes every
turn cannot be served from a local model's prompt cache, and reprocessing it costs far more than
the occasional regenerated reply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from picoflow import Message
from picoflow_demos.hotel.criteria import mentions_dates


@dataclass(frozen=True, slots=True)
class Topic:
    """One thing Explore must learn before it can search."""

    name: str
    question: str
    asked: Callable[[str], object]
    """Whether the assistant's question is about it."""
    given: Callable[[str], object]
    """Whether a guest message gives it, asked or not."""
    reply_counts: bool = True
    """Whether any reply to the question answers it ("none" does, for a budget; not for dates)."""
    may_ask_again: bool = False
    """Asking again can be right (a check-in in the past, an amenity we don't list)."""
    why_again: Callable[[str], object] | None = None
    """Whether a reply asking again says why (the date has passed, the amenity is not offered).
    Asking again is right only just after the guest gave it, and with a reason; otherwise it is the
    model losing track."""


def _words(pattern: str) -> Callable[[str], object]:
    return re.compile(pattern, re.IGNORECASE).search


TOPICS: tuple[Topic, ...] = (
    Topic("area", "Is your stay in the Portland area?", _words(r"portland"), _words(r"portland")),
    Topic(
        "dates",
        "What are your check-in and check-out dates?",
        _words(r"\bdates?\b|check-?in|check-?out"),
        lambda text: mentions_dates([text]),
        reply_counts=False,
        may_ask_again=True,
        why_again=_words(
            r"\bpast\b|passed|already|before|after|earlier|later|today|invalid|not valid|can(no|')t|sorry"
            r"|which year|unclear|clarify|exact|specific"
        ),
    ),
    Topic(
        "budget",
        "What nightly budget do you have in mind: a minimum, a maximum or both?",
        _words(r"budget|price|how much"),
        _words(
            r"\$\s?\d|\bbudget\b|\d\s*(dollars|usd|a night|per night|/night)"
            r"|\b(max|min|under|below|up to)\s*\$?\d+(?![\d.]|\s*(mi\b|miles))"
        ),
    ),
    Topic(
        "room type",
        "Which room type would you like: one bed, two beds or suite?",
        _words(r"room type|one bed|two beds|\bsuite\b"),
        _words(r"\bsuites?\b|\bbeds?\b|bedrooms?|\bking\b|\bqueen\b"),
    ),
    Topic(
        "amenities",
        "Which amenities do you need?",
        _words(r"amenit"),
        _words(
            r"wi-?fi|internet|parking|breakfast|pool|gym|fitness|\bpets?\b|\bdogs?\b|smok|shuttle|restaurant"
            r"|room service|kitchen|charging|tennis|concierge|streaming|amenit"
        ),
        may_ask_again=True,
        why_again=_words(
            r"\bnot?\b|n't|unavailable|sorry|only|offer|list|choose|pick|available|which of|instead"
        ),
    ),
    Topic(
        "distance",
        "Any maximum distance to the airport or the city center, in miles?",
        _words(r"distance|miles|airport|city cent|downtown"),
        _words(r"\bmiles?\b|\bmi\b|airport|downtown|city cent"),
    ),
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# "Shall I search?" and "Is that right?" go over answers on purpose, once all of them are in.
_CONFIRMING = re.compile(r"\b(search|right|correct|confirm)\b|\bis that\b|\bdoes that\b", re.IGNORECASE)


def _question_of(text: str) -> str:
    """The last question of an assistant message: what the guest's next message answers."""
    questions = [sentence for sentence in _SENTENCE_END.split(text.strip()) if sentence.endswith("?")]
    return questions[-1] if questions else ""


def answered(messages: Sequence[Message]) -> list[Topic]:
    """The topics the guest has answered, in interview order."""
    done: set[str] = set()
    question = ""
    for message in messages:
        if message.role == "assistant" and not message.tool_calls:
            question = _question_of(message.content)
        elif message.is_from_user:
            text = message.content
            for topic in TOPICS:
                replied = topic.reply_counts and question and topic.asked(question)
                if replied or topic.given(text):
                    done.add(topic.name)
            question = ""
    return [topic for topic in TOPICS if topic.name in done]


def off_track(messages: Sequence[Message], reply: str) -> str | None:
    """Why ``reply`` must not go out: its question is not one the guest still has to answer.

    A reply asks for something not yet given, or asks again, saying why, for the dates or
    amenities the guest has just given (a check-in in the past, an amenity we don't list), or,
    once everything is answered, confirms ("Shall I search?"). Anything else (asking again for
    something the guest gave, a confirmation while questions remain, or no question at all) gets
    the question to ask instead: a small model asks "Can you confirm?" about answers it was given.
    """
    question = _question_of(reply)
    done = answered(messages)
    waiting = [topic for topic in TOPICS if topic not in done]
    if question and _CONFIRMING.search(question) and not waiting:
        return None
    asked = [topic for topic in TOPICS if topic.asked(question)] if question else []
    latest = next((message.content for message in reversed(messages) if message.is_from_user), "")

    def may_ask_again(topic: Topic) -> bool:
        # Only right after the guest gave it, with the reason said (a refused search is answered
        # after its tool result, where this check does not run).
        if not (topic.may_ask_again and topic.given(latest)):
            return False
        return topic.why_again is None or bool(topic.why_again(reply))

    if any(topic in waiting for topic in asked) or (asked and all(may_ask_again(t) for t in asked)):
        return None
    # Worded as what to write to the guest: told only "ask X", a small model answers X itself.
    instead = (
        f'Write your reply to the guest and end it with this question: "{waiting[0].question}"'
        if waiting
        else 'Write your reply to the guest: list the details in a few lines and ask "Shall I search?"'
    )
    if asked:
        repeated = next(topic for topic in asked if not may_ask_again(topic))
        return f"the guest already gave the {repeated.name}; do not ask for it again. {instead}"
    return f"your reply does not ask the next question. {instead}"


# A small model, told how to word its reply, sometimes opens it with a stock refusal it does not mean.
_STOCK_REFUSAL = re.compile(
    r"\b(I'm|I am) sorry,? but I (can't|cannot|am unable to) (assist|help) with (that|this)( request)?\.\s*",
    re.IGNORECASE,
)


def without_stock_refusal(reply: str) -> str:
    """``reply`` without a stock "I'm sorry, but I can't assist with that." when more follows it."""
    cleaned = _STOCK_REFUSAL.sub("", reply).strip()
    return cleaned or reply


def next_question(messages: Sequence[Message]) -> str:
    """The question to ask now, as code writes it (when the model will not)."""
    done = answered(messages)
    waiting = [topic for topic in TOPICS if topic not in done]
    return waiting[0].question if waiting else "Shall I search with these details?"
