"""What the runtime injects into tools and the model never sees.

``Caller`` is what an application passes to ``FlowEngine.run`` about the authenticated caller.
``RunContext`` is what a tool handler receives: a parameter typed ``RunContext`` (or
``RunContext[MyDeps]``) is filled by picoflow and left out of the tool's schema, so the model can
neither see nor choose it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Literal, TypeAlias

from typing_extensions import TypeVar

from picoflow._frozen import quick_init
from picoflow.attachments import Attachment
from picoflow.usage import Usage

DepsT = TypeVar("DepsT", default=Any)

#: Argument names reserved for injected values. A tool schema may not expose them, and a model
#: that sends one has it dropped (and a warning recorded).
INJECTED_NAMES: frozenset[str] = frozenset(
    {"principal", "customer_id", "visibilities", "deps", "session_id", "usage"}
)


class _Anyone(Enum):
    ANY = "any principal"


ANY_PRINCIPAL = _Anyone.ANY
"""For operators' tools (the command line): read sessions whatever principal they belong to."""

PrincipalFilter: TypeAlias = "str | Literal[_Anyone.ANY] | None"
"""Whose sessions a read may see: one principal's, the anonymous ones (None), or ``ANY_PRINCIPAL``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """The authenticated caller of a turn. Set by the application, never by the model."""

    principal: str | None = None
    """Who is asking (a customer or user id). Sessions are bound to the principal that created them."""
    visibilities: frozenset[str] = frozenset()
    """Access labels of the caller (e.g. catalog visibilities)."""
    deps: Any = None
    """Application dependencies for tools (database handles, clients). Overrides the engine's deps."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Per-request settings from the caller (never persisted)."""


@quick_init
@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """Injected into tool handlers that declare a parameter of this type."""

    principal: str | None
    visibilities: frozenset[str]
    deps: DepsT
    session_id: str
    step: str
    usage: Usage
    """Usage of the turn so far."""
    config: Mapping[str, Any]
    attachments: tuple[Attachment, ...] = ()
    """The files sent with this turn's message, with their bytes."""
    idempotency_key: str | None = None
    """For a call that runs because someone approved it: the approval's id. The handler's side
    effect keyed by it (a refund row, a message id) is done once however often it is asked."""

    @property
    def customer_id(self) -> str | None:
        """The principal, under the name support flows usually give it."""
        return self.principal
