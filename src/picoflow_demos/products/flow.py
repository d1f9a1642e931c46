"""ProductFlow: catalog lookup where the model reads the question and code answers it.

Each turn the model's only job is a small reading of the user's latest message: the product
codes it writes, the words that name a product, and what the user wants. Code checks every code
against the SKU rule (``LUM-`` two capital letters and three digits), looks the products up through
the caller's visibilities and writes the reply from the catalog record. A product the caller may
not see gets the same reply as a product that does not exist, and a code that breaks the rule is
refused with the rule, never with the text that was sent.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from picoflow import Direct, Flow, Outcome, Prompt, Step, TerminateStep, direct, direct_to, since_last_user
from picoflow.messages import Message
from picoflow.slots import bears_out
from picoflow_demos._common import SAYS_GOODBYE, usd
from picoflow_demos.products.catalog import SKU_PATTERN, Product, search_products, visible_product

PRODUCTS = Prompt.file("products.md")

# One answer for "no such SKU" and "not for your eyes": the difference must not leak.
NOT_FOUND = "No product with SKU {sku} was found."
MALFORMED = (
    "A product code must be a SKU such as LUM-VS-100: LUM, two letters and three digits, joined by "
    "hyphens (VS-100 will do too)."
)
HELP = (
    "I can look up our products: give a product's SKU, such as LUM-VS-100 or VS-100, or a few words of "
    "its name, such as vibration sensor."
)
NO_MATCH = "No product of our catalog matches those words. " + HELP
FAREWELL = "Thank you for asking Lumen Industrial Supply. Goodbye!"


class ProductRequest(BaseModel):
    """What the user asks for in their latest message."""

    # Every field is required so the model writes them in this order: what the message names
    # comes before the action it decides.
    codes: list[str] = Field(
        max_length=5, description="Product codes exactly as the user wrote them, such as vs-100"
    )
    words: list[str] = Field(
        max_length=4, description="Words naming a kind of product when no code is given, such as sensor"
    )
    action: Annotated[Literal["product", "goodbye", "other"], SAYS_GOODBYE] = Field(
        description="product: a question about products; goodbye: the user ends the conversation; "
        "other: anything else"
    )


def _compact(text: str) -> str:
    """Letters and digits only, lower case: "VS-100" and "vs 100" are both "vs100"."""
    return "".join(c for c in text.casefold() if c.isalnum())


def sku_of(code: str) -> str | None:
    """The SKU a product code stands for ("vs-100", "VS100", "lum-vs-100" give LUM-VS-100), or None
    when the code does not follow the SKU rule."""
    compact = _compact(code).upper().removeprefix("LUM")
    sku = f"LUM-{compact[:2]}-{compact[2:]}"
    return sku if re.fullmatch(SKU_PATTERN, sku) else None


def said(code: str, message: str) -> bool:
    """Whether the user's words hold ``code`` (its letters and digits, in order).

    A code the model read but the user never wrote is the model's invention: it is dropped.
    """
    compact = _compact(code)
    return bool(compact) and compact in _compact(message)


def spec_sheet(product: Product) -> str:
    """A product's record as the user reads it: name, SKU, price and every specification."""
    specs = [f"- {name}: {value}" for name, value in product.specs.items()]
    return "\n".join([f"**{product.name}** ({product.sku}), {usd(product.price_usd)}", *specs])


def product_line(product: Product) -> str:
    return f"- **{product.name}** ({product.sku}), {usd(product.price_usd)}"


class Lookup(Step):
    """Answer questions about catalog products, from the catalog."""

    memory = "products"
    output = ProductRequest
    terminate_tool = False

    def prompt(self) -> str:
        return PRODUCTS.text

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The reading needs only the user's latest words; spec sheets shown earlier would only
        # lengthen a small model's prompt.
        return since_last_user(memory)

    def on_response(self, request: ProductRequest) -> Outcome:
        message = self.last_user_message or ""
        self.erase_memory()
        if request.action == "goodbye" and bears_out(ProductRequest, "action", "goodbye", message):
            return direct_to(ProductsGoodbye, FAREWELL)
        codes = [code for code in dict.fromkeys(request.codes) if said(code, message)]
        words = [word for word in dict.fromkeys(request.words) if said(word, message)]
        visibilities = self.caller.visibilities
        if codes:
            return self.answer_codes(codes, words, visibilities)
        if words and request.action == "product":
            return self.answer_words(words, visibilities)
        return direct(HELP)

    def answer_codes(
        self, codes: Sequence[str], words: Sequence[str], visibilities: Collection[str]
    ) -> Direct:
        skus = [sku_of(code) for code in codes]
        found = [(sku, visible_product(sku, visibilities)) for sku in skus if sku is not None]
        shown = [product for _, product in found if product is not None]
        parts = [spec_sheet(product) if product else NOT_FOUND.format(sku=sku) for sku, product in found]
        if None in skus:
            parts.append(MALFORMED)
        if not shown and words:
            # Nothing the user named exists for them: what their words match is the next best answer.
            matches = search_products(" ".join(words), visibilities) or [
                product for word in words for product in search_products(word, visibilities)
            ]
            if matches:
                unique = {product.sku: product for product in matches}.values()
                lines = [product_line(product) for product in unique]
                parts.append("\n".join(["These products of our catalog match your words:", *lines]))
        self.state["shown"] = [product.sku for product in shown]
        return direct("\n\n".join(parts))

    def answer_words(self, words: Sequence[str], visibilities: Collection[str]) -> Direct:
        matches = search_products(" ".join(words), visibilities)
        self.state["shown"] = [product.sku for product in matches[:1]] if len(matches) == 1 else []
        if len(matches) == 1:
            return direct(spec_sheet(matches[0]))
        if not matches:
            return direct(NO_MATCH)
        lines = [product_line(product) for product in matches]
        return direct("\n".join(["These products of our catalog match:", *lines]))


class ProductsGoodbye(TerminateStep):
    """Closing words."""

    memory = "products-goodbye"


class ProductFlow(Flow):
    """Look up Lumen Industrial Supply products and their specifications."""

    name = "products"
    steps = [Lookup, ProductsGoodbye]
