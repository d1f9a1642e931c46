"""``quick_init`` builds the same frozen values as the dataclass's own ``__init__``, only faster."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from picoflow._frozen import quick_init
from picoflow.messages import Message, ToolCall


@dataclass(frozen=True, slots=True)
class Plain:
    name: str
    count: int = 1
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str | None = field(default=None, kw_only=True)
    checked: list[str] = field(default_factory=list, init=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must not be negative")


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:
    name: str
    count: int = 1
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str | None = field(default=None, kw_only=True)
    checked: list[str] = field(default_factory=list, init=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must not be negative")


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 3), {}), (("a", 3, ("x",)), {"note": "n"}), ((), {"name": "b", "count": 0})],
)
def test_the_same_value_is_built(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    plain, quick = Plain(*args, **kwargs), Quick(*args, **kwargs)  # type: ignore[arg-type]
    assert dataclasses.astuple(plain) == dataclasses.astuple(quick)
    assert repr(plain).removeprefix("Plain") == repr(quick).removeprefix("Quick")
    assert hash(Quick(*args, **kwargs)) == hash(quick)  # type: ignore[arg-type]


def test_factories_give_each_value_its_own_default() -> None:
    first, second = Quick("a"), Quick("b")
    assert first.checked == [] and first.checked is not second.checked


def test_it_stays_frozen_checks_its_arguments_and_runs_post_init() -> None:
    quick = Quick("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", 1, (), [], "a keyword-only note given by position")  # type: ignore[misc]
    with pytest.raises(ValueError, match="negative"):
        Quick("a", -1)
    assert dataclasses.replace(quick, count=5) == Quick("a", 5)


def test_only_frozen_slotted_dataclasses_take_it() -> None:
    @dataclass
    class Mutable:
        x: int

    with pytest.raises(TypeError, match="frozen dataclasses with slots=True"):
        quick_init(Mutable)


def test_messages_use_it() -> None:
    message = Message("user", "hi", seq=3)
    assert message == Message(role="user", content="hi", seq=3) and message.tool_calls == ()
    assert ToolCall("search").args == {} and ToolCall("search").args is not ToolCall("search").args
