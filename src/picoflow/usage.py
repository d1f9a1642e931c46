"""Token and call accounting, and the per-turn limits that keep a turn bounded."""

from __future__ import annotations

from dataclasses import dataclass, fields

from picoflow.exceptions import UsageLimitExceeded


@dataclass(slots=True)
class Usage:
    """What a model call, a turn or a whole session consumed.

    Rejected and retried model responses are counted too: they were paid for.
    """

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` the model spent reasoning (providers that report it)."""
    cached_input_tokens: int = 0
    """Part of ``input_tokens`` served from the provider's prompt cache."""
    cache_creation_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic)."""
    model_calls: int = 0
    """Model requests made."""
    tool_calls: int = 0
    """Tool handlers run (validation failures and unknown tools are not counted)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage in place."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.cache_creation_tokens += other.cache_creation_tokens
        self.model_calls += other.model_calls
        self.tool_calls += other.tool_calls

    def __add__(self, other: Usage) -> Usage:
        total = self.copy()
        total.add(other)
        return total

    def copy(self) -> Usage:
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.reasoning_tokens,
            self.cached_input_tokens,
            self.cache_creation_tokens,
            self.model_calls,
            self.tool_calls,
        )

    def as_dict(self) -> dict[str, int]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["total_tokens"] = self.total_tokens
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageLimits:
    """Upper bounds for one turn. ``None`` means unbounded; exceeding a bound fails the turn."""

    model_calls: int | None = 16
    """Model requests per turn, rejected and retried attempts included."""
    tool_calls: int | None = 32
    """Tool handlers run per turn."""
    input_tokens: int | None = None
    """Prompt tokens per turn."""
    output_tokens: int | None = None
    """Completion tokens per turn."""
    total_tokens: int | None = None
    """Prompt plus completion tokens per turn."""
    transitions: int | None = 32
    """Step changes per turn (guards against logic steps routing in a circle)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value < 1:
                raise ValueError(f"UsageLimits.{f.name} must be at least 1 or None, not {value}")

    def check_before_model_call(self, usage: Usage) -> None:
        if self.model_calls is not None and usage.model_calls >= self.model_calls:
            raise UsageLimitExceeded("model_calls", self.model_calls)

    def check_before_tool_call(self, usage: Usage) -> None:
        if self.tool_calls is not None and usage.tool_calls >= self.tool_calls:
            raise UsageLimitExceeded("tool_calls", self.tool_calls)

    def check_transition(self, transitions: int) -> None:
        if self.transitions is not None and transitions > self.transitions:
            raise UsageLimitExceeded("transitions", self.transitions)

    def check_tokens(self, usage: Usage) -> None:
        if self.input_tokens is not None and usage.input_tokens > self.input_tokens:
            raise UsageLimitExceeded("input_tokens", self.input_tokens)
        if self.output_tokens is not None and usage.output_tokens > self.output_tokens:
            raise UsageLimitExceeded("output_tokens", self.output_tokens)
        if self.total_tokens is not None and usage.total_tokens > self.total_tokens:
            raise UsageLimitExceeded("total_tokens", self.total_tokens)
