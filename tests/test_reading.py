"""The reading format: the answer schema derived from a slots model, and the model's answer read
back into items (``parse_reading``), each on its own."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError

from picoflow import Extraction
from picoflow._schema import json_schema, strict_variant
from picoflow.slots.grounding import Item
from picoflow.slots.reading import FORMAT_HINT, ReadingFormat, parse_reading, reading_of
from trip_slots import Trip


def test_reading_schema_has_one_item_kind_per_field_and_is_strict() -> None:
    schema = json_schema(reading_of(Trip))
    assert schema["required"] == ["found"]
    assert schema["description"] == "What the user's latest message says (A trip being planned.)"
    kinds = [ref["$ref"].removeprefix("#/$defs/") for ref in schema["properties"]["found"]["items"]["anyOf"]]
    assert kinds == ["Trip_name", "Trip_age", "Trip_start", "Trip_end", "Trip_cities"]
    for kind, name in zip(kinds, Trip.model_fields, strict=True):
        item = schema["$defs"][kind]
        assert list(item["properties"]) == ["field", "quote", "value"]  # the quote before the value
        assert item["required"] == ["field", "quote", "value"]
        assert item["properties"]["field"]["const"] == name
    assert strict_variant(schema) is not None


def test_reading_values_keep_the_field_type_and_constraints_without_null() -> None:
    defs = json_schema(reading_of(Trip))["$defs"]
    values = {kind: item["properties"]["value"] for kind, item in defs.items()}
    assert values == {
        "Trip_name": {"type": "string", "description": "The traveller's first name"},
        "Trip_age": {"type": "integer", "exclusiveMinimum": 0, "maximum": 120, "description": "Age in years"},
        "Trip_start": {"type": "string", "format": "date", "description": "First day of the trip"},
        "Trip_end": {"type": "string", "format": "date", "description": "Last day of the trip"},
        "Trip_cities": {"type": "array", "items": {"type": "string"}, "description": "Cities to visit"},
    }
    assert "null" not in json.dumps(defs)
    reading = reading_of(Trip)
    with pytest.raises(ValidationError):
        reading.model_validate({"found": [{"field": "name", "quote": "Ada", "value": None}]})
    with pytest.raises(ValidationError):
        reading.model_validate({"found": [{"field": "email", "quote": "Ada", "value": "Ada"}]})
    parsed = reading.model_validate({"found": [{"field": "age", "quote": "36", "value": 36}]})
    assert parsed.model_dump() == {"found": [{"field": "age", "quote": "36", "value": 36}]}


def test_the_same_slots_model_gives_the_same_reading_format() -> None:
    assert reading_of(Trip) is reading_of(Trip)
    assert issubclass(reading_of(Trip), ReadingFormat) and reading_of(Trip).__name__ == "TripReading"


def test_reading_of_a_single_field_model() -> None:
    class Name(BaseModel):
        name: str | None = None

    schema = json_schema(reading_of(Name))
    assert schema["properties"]["found"]["items"] == {"$ref": "#/$defs/Name_name"}
    assert strict_variant(schema) is not None


def test_parse_reads_items_in_order_and_drops_blank_values() -> None:
    text = json.dumps(
        {
            "found": [
                {"field": "age", "quote": "36", "value": 36},
                {"field": "name", "value": "Ada"},
                {"field": "name", "quote": "x", "value": ""},
                {"field": "cities", "quote": "none", "value": None},
            ]
        }
    )
    assert parse_reading(Trip, text) == Extraction((Item("age", "36", 36), Item("name", "", "Ada")))
    assert parse_reading(Trip, '{"found": []}') == Extraction()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "nope",
        "[]",
        '{"found": null}',
        '{"found": "Ada"}',
        '{"found": [1]}',
        '{"found": [{"field": "x"}]}',
        '{"found": [{"field": ["name"], "quote": "Ada", "value": "Ada"}]}',
    ],
)
def test_parse_refuses_anything_else_with_the_format_hint(text: str) -> None:
    with pytest.raises(ValueError, match=r"^Answer with one JSON object") as error:
        parse_reading(Trip, text)
    assert str(error.value) == FORMAT_HINT


def test_given_joins_list_values_of_the_same_field_and_keeps_the_last_scalar() -> None:
    extraction = Extraction(
        (
            Item("cities", "Rome", ["Rome"]),
            Item("name", "Ada", "Ada"),
            Item("cities", "Paris and Oslo", ["Paris", "Oslo"]),
            Item("name", "Ada Lovelace", "Ada Lovelace"),
        )
    )
    assert extraction.given == {"cities": ["Rome", "Paris", "Oslo"], "name": "Ada Lovelace"}
    assert Extraction().given == {}
