"""ProductFlow: catalog lookup with one strictly validated tool and per-caller visibility.

``get_product_spec`` takes a SKU that must match ``^LUM-[A-Z]{2}-\\d{3}$``. A malformed SKU is
refused before the handler runs, with a message naming the field and the rule but never the text
that was sent (it may be anything the user typed). A product the caller may not see gets the
same answer as a product that does not exist.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field

from picoflow import Direct, Flow, Prompt, Reject, RunContext, TerminateStep, ToolError, direct, tool
from picoflow.messages import ModelResponse
from picoflow_demos._common import (
    LeavesOnRequest,
    correct_once,
    dollar_amounts,
    goodbye_check,
    repeated_lookup,
    unanswered_question,
    usd,
)
from picoflow_demos.products.catalog import SKU_PATTERN, Product, products, search_products, visible_product

PRODUCTS = Prompt.file("products.md")

# One answer for "no such SKU" and "not for your eyes": the difference must not leak.
NOT_FOUND = "No product with that SKU was found."

Sku = Annotated[str, Field(pattern=SKU_PATTERN, description="Product SKU such as LUM-VS-100")]

# Something that looks like a product code ("vs-100", "GW 510") in the user's words.
_CODE = re.compile(r"\b[a-z]{2}[\s-]?\d{3}\b", re.IGNORECASE)
# A code written the way SKUs are ("vs-100", "VS100", "LUM-VS-100", "GW 510"), not "is 100".
_SKU_LIKE = re.compile(r"(?i:\b(?:lum-)?([a-z]{2})-?(\d{3})\b)|\b([A-Z]{2}) (\d{3})\b")
_BARE_PRICE = re.compile(r"(?<![\d$.,])(\d{1,3}(?:,\d{3})*\.\d{2})\b")
# A request for information, as opposed to thanks or small talk.
_ASKS = re.compile(r"\?|\b(what|which|how|tell|show|give|find|list|need|want|looking|price|cost)\b", re.I)


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def catalog_words(text: str) -> list[str]:
    """The words of ``text`` that name something in the catalog ("sensors" gives "sensor")."""
    vocabulary = {
        _singular(word)
        for product in products()
        for word in re.findall(r"[a-z]{4,}", f"{product.name} {product.category}".lower())
    }
    words = [_singular(word) for word in re.findall(r"[a-z]{4,}", text.lower())]
    return list(dict.fromkeys(word for word in words if word in vocabulary))


def mentions_a_product(text: str) -> bool:
    """Whether a question names a product code or a word of the catalog (sensor, gateway, ...)."""
    return bool(_CODE.search(text) or catalog_words(text))


def skus_in(text: str) -> list[str]:
    """The SKUs the user's product codes stand for ("vs-100" is LUM-VS-100), in order."""
    found = [
        f"LUM-{(letters or spaced).upper()}-{digits or spaced_digits}"
        for letters, digits, spaced, spaced_digits in _SKU_LIKE.findall(text)
    ]
    return list(dict.fromkeys(found))


def _prices_in(text: str) -> set[Decimal]:
    """Amounts in ``text`` that read as prices: "$189", and also a bare "189.00"."""
    bare = {Decimal(value.replace(",", "")) for value in _BARE_PRICE.findall(text)}
    return set(dollar_amounts(text)) | bare


def _lookup_hint(question: str) -> str:
    skus = skus_in(question)
    lookup = (
        f'call get_product_spec with sku "{skus[0]}" first'
        if skus
        else "look the product up with get_product_spec or search_products first"
    )
    return f"{lookup}, and answer only from what the tools return."


def summary(product: Product) -> dict[str, Any]:
    return {"sku": product.sku, "name": product.name, "category": product.category}


def spec_sheet(product: Product) -> str:
    """A product's record as a reply written in code (used when the model asks for it twice)."""
    specs = [f"- {name}: {value}" for name, value in product.specs.items()]
    return "\n".join([f"**{product.name}** ({product.sku}), {usd(product.price_usd)}", *specs])


class Lookup(LeavesOnRequest):
    """Answer questions about catalog products."""

    memory = "products"

    def prompt(self) -> str:
        return PRODUCTS.text

    def check_response(self, response: ModelResponse) -> Reject | None:
        refused = goodbye_check(self, response)
        if refused is not None or response.tool_calls:
            return refused
        return correct_once(self, self._unfounded(response.text))

    def on_response(self, response: str) -> str | Direct:
        # Corrected once and still answering without the catalog: the catalog answers instead.
        return response if self._unfounded(response) is None else direct(self._catalog_answer())

    def _unfounded(self, reply: str) -> str | None:
        """Why ``reply`` does not rest on the catalog, if it does not.

        Figures about a product nobody looked up since the question are invented; so is a "we don't
        have that" to a product question that was never looked up.
        """
        question = unanswered_question(self.messages)
        if question is not None:  # nothing was looked up since the user asked
            asks = re.search(r"\d", reply) or _ASKS.search(question)
            return _lookup_hint(question) if asks and mentions_a_product(question) else None
        looked_up: set[Decimal] = set()
        for message in reversed(self.messages):
            if message.is_from_user:
                break
            if message.role == "tool":
                looked_up.update(dollar_amounts(message.content))
        if any(amount not in looked_up for amount in _prices_in(reply)):
            return (
                "quote only prices that get_product_spec returned: call it for each product you give a "
                "price for, and copy the price."
            )
        return None

    def _catalog_answer(self) -> str:
        """The products the user asked about, written from the catalog."""
        question = self.last_user_message or ""
        visibilities = self.caller.visibilities
        skus = skus_in(question)
        if skus:
            found = [(sku, visible_product(sku, visibilities)) for sku in skus]
            return "\n\n".join(
                spec_sheet(product) if product else f"No product with SKU {sku} was found."
                for sku, product in found
            )
        matches = search_products(" ".join(catalog_words(question)), visibilities)
        if catalog_words(question) and matches:
            lines = [f"- **{product.name}** ({product.sku}), {usd(product.price_usd)}" for product in matches]
            return "\n".join(["These products of our catalog match:", *lines])
        return (
            "I can only answer from our catalog. Which product do you mean? Its SKU (such as LUM-VS-100) "
            "or a few words of its name will do."
        )

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
