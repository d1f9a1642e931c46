"""Tool schemas from signatures, exports for each provider, and model-safe validation errors."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from picoflow import RunContext, Step, tool
from picoflow.messages import ToolCall
from picoflow.models.anthropic import anthropic_tool
from picoflow.models.openai import openai_tool
from picoflow.tools import collect_tools


class Criteria(BaseModel):
    """What the user wants."""

    rooms: list[Literal["one bed", "two beds", "suite"]] = Field(min_length=1)
    max_price: float = Field(gt=0, description="Highest nightly price in USD.")


class Catalog(Step):
    """Catalog."""

    @tool
    def get_product_spec(self, sku: Annotated[str, Field(pattern=r"^LUM-[A-Z]{2}-\d{3}$")]) -> str:
        """Read one product's full record.

        Args:
            sku: Product code such as LUM-VS-100.
        """
        return sku

    @tool("find_hotels", strict=True)
    def search(self, criteria: Criteria, ctx: RunContext, nights: int = Field(1, ge=1, le=30)) -> str:
        """Find hotels."""
        return ""

    @tool(description="Exact two-field tool.")
    def pair(self, left: str, right: date) -> str:
        """Ignored docstring."""
        return ""


def specs() -> dict[str, Any]:
    found, groups = collect_tools(Catalog, where="step Catalog")
    assert groups == []
    return found


def test_schema_from_signature_with_constraints_and_docstring_args() -> None:
    sku = specs()["get_product_spec"]
    assert openai_tool(sku.definition) == {
        "type": "function",
        "function": {
            "name": "get_product_spec",
            "description": "Read one product's full record.",
            "parameters": {
                "type": "object",
                "properties": {
                    "sku": {
                        "type": "string",
                        "pattern": r"^LUM-[A-Z]{2}-\d{3}$",
                        "description": "Product code such as LUM-VS-100.",
                    }
                },
                "required": ["sku"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    assert anthropic_tool(sku.definition) == {
        "name": "get_product_spec",
        "description": "Read one product's full record.",
        "input_schema": sku.definition.parameters,
    }


def test_alias_nested_model_context_hidden_and_defaults_not_strict() -> None:
    found = specs()
    search = found["find_hotels"]
    assert search.attribute == "search" and search.context_params == ("ctx",)
    params = search.definition.parameters
    assert set(params["properties"]) == {"criteria", "nights"}
    assert params["properties"]["nights"] == {"default": 1, "maximum": 30, "minimum": 1, "type": "integer"}
    criteria = params["$defs"]["Criteria"]
    assert criteria["properties"]["max_price"] == {
        "description": "Highest nightly price in USD.",
        "exclusiveMinimum": 0,
        "type": "number",
    }
    assert criteria["properties"]["rooms"]["minItems"] == 1
    # An optional argument would have to become required in strict mode, so strict is not used.
    assert search.definition.strict is False
    assert found["pair"].definition.description == "Exact two-field tool."
    assert found["pair"].definition.strict is True


def test_validation_error_names_field_and_rule_never_the_value() -> None:
    sku = specs()["get_product_spec"]
    secret = "my card is 4111-1111-1111-1111"
    result = sku.validate(ToolCall("get_product_spec", {"sku": secret}))
    assert result == (
        "Invalid arguments for get_product_spec:\n"
        "- sku: String should match pattern '^LUM-[A-Z]{2}-\\d{3}$'\n"
        "Correct the arguments and call get_product_spec again."
    )
    assert secret not in str(result)
    ok = sku.validate(ToolCall("get_product_spec", {"sku": "LUM-VS-100"}))
    assert not isinstance(ok, str) and ok.sku == "LUM-VS-100"  # type: ignore[attr-defined]


def test_literal_error_value_redacted_and_nested_locations() -> None:
    search = specs()["find_hotels"]
    result = search.validate(
        ToolCall("find_hotels", {"criteria": {"rooms": ["penthouse"], "max_price": -1}, "nights": 99})
    )
    assert result == (
        "Invalid arguments for find_hotels:\n"
        "- criteria.rooms[0]: Input should be 'one bed', 'two beds' or 'suite'\n"
        "- criteria.max_price: Input should be greater than 0\n"
        "- nights: Input should be less than or equal to 30\n"
        "Correct the arguments and call find_hotels again."
    )
    assert "penthouse" not in str(result)


def test_custom_validator_echoing_the_value_is_redacted() -> None:
    from pydantic import field_validator

    class Note(BaseModel):
        text: str

        @field_validator("text")
        @classmethod
        def _no_digits(cls, value: str) -> str:
            if any(ch.isdigit() for ch in value):
                raise ValueError(f"{value} must not contain digits")
            return value

    class Notes(Step):
        """Notes."""

        @tool
        def save(self, note: Note) -> str:
            """Save."""
            return ""

    found, _ = collect_tools(Notes, where="step Notes")
    result = found["save"].validate(ToolCall("save", {"note": {"text": "call me at 555 0100"}}))
    assert result == (
        "Invalid arguments for save:\n"
        "- note.text: Value error, <submitted value> must not contain digits\n"
        "Correct the arguments and call save again."
    )


def test_allowed_values_and_bounds_are_never_garbled_by_redaction() -> None:
    class Rooms(Step):
        """Rooms."""

        @tool
        def pick(self, room: Literal["one bed", "two beds", "suite"], nights: int = Field(lt=100)) -> str:
            """Pick."""
            return ""

    found, _ = collect_tools(Rooms, where="step Rooms")
    result = found["pick"].validate(ToolCall("pick", {"room": "bed", "nights": 100}))
    assert result == (
        "Invalid arguments for pick:\n"
        "- room: Input should be 'one bed', 'two beds' or 'suite'\n"
        "- nights: Input should be less than 100\n"
        "Correct the arguments and call pick again."
    )


def test_a_tool_is_idempotent_only_when_marked() -> None:
    class Booking(Step):
        """Book."""

        @tool(idempotent=True)
        def quote(self, city: str) -> str:
            """Quote a stay."""
            return city

        @tool
        def book(self, city: str) -> str:
            """Book a stay."""
            return city

    specs, _ = collect_tools(Booking, where="step Booking")
    assert specs["quote"].idempotent and not specs["book"].idempotent
