"""The Lumen Industrial Supply catalog shipped with the package, read through the caller's eyes.

Every read takes the caller's visibilities. A product the caller may not see is answered exactly
like one that does not exist, so nobody can learn that a hidden SKU is real.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from decimal import Decimal
from difflib import get_close_matches
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, TypeAdapter

SKU_PATTERN = r"^LUM-[A-Z]{2}-\d{3}$"
PUBLIC = "public"


class Product(BaseModel):
    """One catalog record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sku: str
    name: str
    category: str
    visibility: str
    """``public``, or the label a caller needs among its visibilities (``partner``, ``internal``)."""
    price_usd: Decimal
    specs: dict[str, str]

    def visible_to(self, visibilities: Collection[str]) -> bool:
        return self.visibility == PUBLIC or self.visibility in visibilities


@cache
def products() -> tuple[Product, ...]:
    text = (
        resources.files("picoflow_demos.products").joinpath("data/catalog.json").read_text(encoding="utf-8")
    )
    return tuple(TypeAdapter(list[Product]).validate_python(json.loads(text)))


def visible_product(sku: str, visibilities: Collection[str]) -> Product | None:
    """The product, or None when it does not exist *or* the caller may not see it."""
    product = next((item for item in products() if item.sku == sku), None)
    return product if product is not None and product.visible_to(visibilities) else None


def search_products(words: str, visibilities: Collection[str], *, limit: int = 10) -> list[Product]:
    """Visible products whose SKU, name or category holds every word, in catalog order.

    A word of five letters or more also matches a catalog word it misspells by a letter or two
    ("presure" finds "pressure"), so a typo is not answered like a product we do not sell.
    """
    wanted = words.casefold().split()
    found = [
        product
        for product in products()
        if product.visible_to(visibilities)
        and all(
            _holds(f"{product.sku} {product.name} {product.category}".casefold(), word) for word in wanted
        )
    ]
    return found[:limit]


def _holds(text: str, word: str) -> bool:
    if word in text:
        return True
    return len(word) >= 5 and bool(get_close_matches(word, text.split(), n=1, cutoff=0.85))
