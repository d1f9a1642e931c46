"""The slots model the slot-filling tests share: a trip, with a rule across two of its fields."""

from __future__ import annotations

from datetime import date
from typing import Self

from pydantic import BaseModel, Field, model_validator


class Trip(BaseModel):
    """A trip being planned."""

    name: str | None = Field(None, description="The traveller's first name")
    age: int | None = Field(None, gt=0, le=120, description="Age in years")
    start: date | None = Field(None, description="First day of the trip")
    end: date | None = Field(None, description="Last day of the trip")
    cities: list[str] | None = Field(None, description="Cities to visit")

    @model_validator(mode="after")
    def _end_after_start(self) -> Self:
        if self.start and self.end and self.end <= self.start:
            raise ValueError("the end date must be after the start date")
        return self
