"""The one rule for text picoflow will keep, shared by the engine (input), the runner (model replies)
and the HTTP routes, so every caller is refused alike."""

from __future__ import annotations

from picoflow.exceptions import InvalidInput, MessageTooLong

__all__ = ["check_message", "check_text", "storable"]


def storable(text: str) -> bool:
    """Whether every store can keep ``text``: no NUL (PostgreSQL refuses it) and no lone surrogate
    (it cannot be encoded as UTF-8)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: str, name: str) -> None:
    """Refuse text no store can keep (see ``storable``). Checked before the model is called, so a
    refused message costs nothing and changes nothing; raises ``InvalidInput`` naming the field
    (never echoing the value)."""
    if storable(value):
        return
    if "\x00" in value:
        raise InvalidInput(f"{name} must not contain NUL characters", field=name)
    raise InvalidInput(f"{name} must be valid Unicode text (it holds a lone surrogate)", field=name)


def check_message(message: object, max_chars: int) -> str:
    """A user's message as a turn sees it (stripped), or the rule it breaks: not text, over
    ``max_chars`` as sent (``MessageTooLong``), empty, or text no store can keep."""
    if not isinstance(message, str):
        raise InvalidInput(f"message must be text, not {type(message).__name__}", field="message")
    # The limit is of the message as sent: what a client checks before sending, and what the
    # OpenAPI document states (``maxLength``).
    if len(message) > max_chars:
        raise MessageTooLong(f"message is longer than {max_chars} characters", field="message")
    text = message.strip()
    if not text:
        raise InvalidInput("message is empty", field="message")
    check_text(text, "message")
    return text
