"""ProductFlow: catalog lookup with one strictly validated tool and per-caller visibility.

``get_product_spec`` takes a SKU that must match ``^LUM-[A-Z]{2}-\\d{3}$``. A malformed SKU is
refused before the handler runs, with a message naming the field and the rule but never the text
that was sent (it may be anything the user typed). A product the caller may not see gets the
same answer as a product that does not exist.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from picoflow import Direct, Flow, Prompt, Reject, RunContext, Step, TerminateStep, ToolError, direct, tool
from picoflow.messages import ModelResponse
from picoflow_demos._common import repeated_lookup, unanswered_question, usd
from picoflow_demos.products.catalog import SKU_PATTERN, Product, products, search_products, visible_product

PRODUCTS = Prompt.file("products.md")

# One answer for "no such SKU" and "not for your eyes": the difference must not leak.
NOT_FOUND = "No product with that SKU was found."

Sku = Annotated[str, Field(pattern=SKU_PATTERN, description="Product SKU such as LUM-VS-100")]

# Something that looks like a product code ("vs-100", "GW 510") in the user's words.
_CODE = re.compile(r"\b[a-z]{2}[\s-]?\d{3}\b", re.IGNORECASE)


def mentions_a_product(text: str) -> bool:
    """Whether a question names a product code or a word of the catalog (sensor, gateway, ...)."""
    if _CODE.search(text):
        return True
    vocabulary = {
        word.rstrip("s")
        for product in products()
        for word in re.findall(r"[a-z]{4,}", f"{product.name} {product.category}".lower())
    }
    return any(word.rstrip("s") in vocabulary for word in re.findall(r"[a-z]{4,}", text.lower()))


def summary(product: Product) -> dict[str, Any]:
    return {"sku": product.sku, "name": product.name, "category": product.category}


def spec_sheet(product: Product) -> str:
    """A product's record as a reply written in code (used when the model asks for it twice)."""
    specs = [f"- {name}: {value}" for name, value in product.specs.items()]
    return "\n".join([f"**{product.name}** ({product.sku}), {usd(product.price_usd)}", *specs])


class Lookup(Step):
    """Answer questions about catalog products."""

    memory = "products"

    def prompt(self) -> str:
        return PRODUCTS.text

    def check_response(self, response: ModelResponse) -> Reject | None:
        # Facts (any figure) about a product nobody looked up since the question are invented.
        question = None if response.tool_calls else unanswered_question(self.messages)
        if question is not None and mentions_a_product(question) and re.search(r"\d", response.text):
            return Reject(
                "look the product up with get_product_spec or search_products first, and answer only from "
                "what they return."
            )
        return None

    @tool
    def get_product_spec(self, sku: Sku, ctx: RunContext) -> dict[str, Any] | Direct:
        """The full record of one product: name, category, price and specifications.

        Args:
            sku: The product SKU, for example LUM-VS-100.
        """
        product = visible_product(sku, ctx.visibilities)
        if product is None:
            raise ToolError(NOT_FOUND)
        if repeated_lookup(self.state, self.messages, product.sku):
            return direct(spec_sheet(product))
        return {**summary(product), "price": usd(product.price_usd), "specs": product.specs}

    @tool
    def search_products(
        self, words: Annotated[str, Field(min_length=1, max_length=80)], ctx: RunContext
    ) -> dict[str, Any]:
        """Find products by words in their name, category or SKU (for example "vibration sensor").

        Args:
            words: Words that must all appear in the product's name, category or SKU.
        """
        return {"products": [summary(product) for product in search_products(words, ctx.visibilities)]}


class ProductsGoodbye(TerminateStep):
    """Closing words."""

    memory = "products-goodbye"


class ProductFlow(Flow):
    """Look up Lumen Industrial Supply products and their specifications."""

    name = "products"
    steps = [Lookup, ProductsGoodbye]
