"""ProductFlow: a strictly validated SKU, refusals that never echo input, hidden products unseen."""

from __future__ import annotations

from typing import Any

from picoflow import Caller, FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.testing import transcript_lines
from picoflow_demos.products import ProductFlow, products, visible_product
from picoflow_demos.products.flow import NOT_FOUND, catalog_words, mentions_a_product, skus_in

PATTERN_ERROR = (
    "Invalid arguments for get_product_spec:\n"
    "- sku: String should match pattern '^LUM-[A-Z]{2}-\\d{3}$'\n"
    "Correct the arguments and call get_product_spec again."
)
VS_100 = (
    '{"sku":"LUM-VS-100","name":"VS-100 vibration sensor","category":"sensors","price":"$189.00",'
    '"specs":{"range":"0-50 g","frequency response":"2 Hz - 10 kHz","output":"4-20 mA",'
    '"ingress protection":"IP67","operating temperature":"-40 to 85 °C"}}'
)


async def ask(script: list[Any], question: str, visibilities: frozenset[str] = frozenset()) -> list[str]:
    engine = FlowEngine([ProductFlow], model=ScriptedModel(script))
    result = await engine.run(
        "products", question, context=Caller(principal="sales-7", visibilities=visibilities)
    )
    assert result.ok, result.error
    return await transcript_lines(engine, result.session_id or "")


async def test_malformed_sku_is_refused_without_echo_and_corrected() -> None:
    lines = await ask(
        [
            ToolCall("get_product_spec", {"sku": "vs-100"}),
            ToolCall("get_product_spec", {"sku": "LUM-VS-100"}),
            "The VS-100 measures 0-50 g from 2 Hz to 10 kHz, 4-20 mA output, IP67.",
        ],
        "What's the range of the vs-100?",
    )
    assert lines == [
        "Lookup | user: What's the range of the vs-100?",
        'Lookup | assistant: -> get_product_spec({"sku": "vs-100"}) #call_1',
        f"Lookup | tool get_product_spec #call_1 (error): {PATTERN_ERROR}",
        'Lookup | assistant: -> get_product_spec({"sku": "LUM-VS-100"}) #call_2',
        f"Lookup | tool get_product_spec #call_2: {VS_100}",
        "Lookup | assistant: The VS-100 measures 0-50 g from 2 Hz to 10 kHz, 4-20 mA output, IP67.",
    ]
    assert "vs-100" not in PATTERN_ERROR


async def test_private_text_in_a_bad_sku_never_comes_back() -> None:
    secret = "my card is 4111 1111 1111 1111"
    lines = await ask([ToolCall("get_product_spec", {"sku": secret}), "Which product do you mean?"], "hi")
    assert lines[2] == f"Lookup | tool get_product_spec #call_1 (error): {PATTERN_ERROR}"
    assert not any("4111" in line for line in lines[2:])


async def test_hidden_product_looks_exactly_like_a_missing_one() -> None:
    lines = await ask(
        [
            ToolCall("get_product_spec", {"sku": "LUM-GW-510"}),
            ToolCall("get_product_spec", {"sku": "LUM-ZZ-999"}),
            ToolCall("search_products", {"words": "gateway"}),
            "I can only find the GW-500 edge gateway.",
        ],
        "Tell me about the GW-510 preview gateway",
        visibilities=frozenset({"partner"}),
    )
    assert lines[2] == f"Lookup | tool get_product_spec #call_1 (error): {NOT_FOUND}"
    assert lines[4] == f"Lookup | tool get_product_spec #call_2 (error): {NOT_FOUND}"
    assert lines[6] == (
        "Lookup | tool search_products #call_3: "
        '{"products":[{"sku":"LUM-GW-500","name":"GW-500 edge gateway","category":"gateways"}]}'
    )
    assert not any("GW-510" in line or "preview" in line for line in lines[2:7:2])


async def test_visible_products_by_visibility() -> None:
    lines = await ask(
        [
            ToolCall("get_product_spec", {"sku": "LUM-GW-510"}),
            ToolCall("get_product_spec", {"sku": "LUM-FM-400"}),
            "Both are available to you.",
        ],
        "GW-510 and FM-400 specs?",
        visibilities=frozenset({"internal"}),
    )
    assert lines[2].startswith(
        'Lookup | tool get_product_spec #call_1: {"sku":"LUM-GW-510",'
        '"name":"GW-510 edge gateway with on-device analytics (preview)","category":"gateways",'
        '"price":"$1,299.00",'
    )
    # "internal" does not include "partner": each label is its own permission.
    assert lines[4] == f"Lookup | tool get_product_spec #call_2 (error): {NOT_FOUND}"


def test_catalog_visibility_rules() -> None:
    assert len(products()) == 9
    assert {product.visibility for product in products()} == {"public", "partner", "internal"}
    assert visible_product("LUM-VS-100", frozenset()) is not None
    assert visible_product("LUM-FM-400", frozenset()) is None
    assert visible_product("LUM-FM-400", frozenset({"partner"})) is not None
    assert visible_product("LUM-CM-700", frozenset({"partner", "internal"})) is not None


async def test_an_answer_with_figures_needs_a_lookup_first() -> None:
    engine = FlowEngine(
        [ProductFlow],
        model=ScriptedModel(
            [
                "Hello! Which product can I help with?",
                "The VS-100 measures 0 to 100 g.",  # from memory, not from the catalog
                ToolCall("get_product_spec", {"sku": "LUM-VS-100"}),
                "The VS-100 measures 0-50 g.",
            ]
        ),
    )
    hello = await engine.run("products", "hi")
    assert hello.message == "Hello! Which product can I help with?" and hello.warnings == ()
    answer = await engine.run("products", "What's the range of the vs-100?", hello.session_id)
    assert answer.message == "The VS-100 measures 0-50 g."
    assert answer.warnings == (
        'call get_product_spec with sku "LUM-VS-100" first, and answer only from what the tools return.',
    )
    lines = await transcript_lines(engine, hello.session_id or "", width=30)
    assert lines[2:] == [
        "Lookup | user: What's the range of the vs-100",
        'Lookup | assistant: -> get_product_spec({"sku": "LUM-VS-100"}) #call_1',
        'Lookup | tool get_product_spec #call_1: {"sku":"LUM-VS-100","name":"VS',
        "Lookup | assistant: The VS-100 measures 0-50 g.",
    ]


def test_product_mentions() -> None:
    assert all(map(mentions_a_product, ["vs-100?", "the GW 510", "your vibration sensors", "LED lights"]))
    assert not any(map(mentions_a_product, ["hi", "thanks a lot", "what can you do?"]))


async def test_the_same_lookup_twice_is_answered_in_code() -> None:
    spec = ToolCall("get_product_spec", {"sku": "LUM-TP-110"})
    engine = FlowEngine([ProductFlow], model=ScriptedModel([spec, spec]))
    result = await engine.run("products", "TP-110 specs?")
    assert result.usage.model_calls == 2 and result.message == (
        "**TP-110 temperature probe** (LUM-TP-110), $74.50\n"
        "- element: PT100 class A\n"
        "- range: -50 to 400 °C\n"
        "- probe length: 150 mm\n"
        "- connection: M12, 4 pin"
    )


async def test_a_greeting_does_not_end_the_session() -> None:
    lines = await ask([ToolCall("terminate_session", {}), "Hello! Which product can I help with?"], "Hello")
    assert lines == ["Lookup | user: Hello", "Lookup | assistant: Hello! Which product can I help with?"]


async def test_a_product_question_answered_without_a_lookup_is_steered_to_the_tools_once() -> None:
    engine = FlowEngine(
        [ProductFlow],
        model=ScriptedModel(
            [
                "I'm sorry, but I can't assist with that.",
                ToolCall("search_products", {"words": "wireless vibration sensor"}),
                "Yes: the VS-200 wireless vibration sensor (LUM-VS-200).",
                "You're welcome!",
            ]
        ),
    )
    asked = await engine.run("products", "Do you have a wireless vibration sensor?")
    assert asked.message == "Yes: the VS-200 wireless vibration sensor (LUM-VS-200)."
    assert asked.warnings == (
        "look the product up with get_product_spec or search_products first, and answer only from what the "
        "tools return.",
    )
    # Thanks mention a product too, but ask for nothing: the reply goes out as it is.
    thanks = await engine.run("products", "great, thanks for the sensor tip", asked.session_id)
    assert thanks.message == "You're welcome!" and thanks.warnings == ()


def test_skus_in_the_users_words() -> None:
    assert skus_in("range of the vs-100? and VS200, LUM-FM-400 or GW 510") == [
        "LUM-VS-100",
        "LUM-VS-200",
        "LUM-FM-400",
        "LUM-GW-510",
    ]
    assert skus_in("is 100 units enough, at 200 a piece?") == []


async def test_figures_nobody_looked_up_never_reach_the_user() -> None:
    engine = FlowEngine(
        [ProductFlow],
        model=ScriptedModel(
            [
                "The VS-100 measures 0 to 100 g.",
                "It measures up to 100 g.",  # corrected once, still invented: the catalog answers instead
                ToolCall("search_products", {"words": "wireless vibration sensor"}),
                "VS-200: 199.00",  # a price no tool returned, even without a dollar sign
                ToolCall("get_product_spec", {"sku": "LUM-VS-200"}),
                "The VS-200 costs $349.00.",
            ]
        ),
    )
    context = Caller(principal="sales-7")
    vs100 = await engine.run("products", "What's the range of the vs-100?", context=context)
    assert vs100.ok and vs100.usage.model_calls == 2
    assert vs100.message == (
        "**VS-100 vibration sensor** (LUM-VS-100), $189.00\n"
        "- range: 0-50 g\n"
        "- frequency response: 2 Hz - 10 kHz\n"
        "- output: 4-20 mA\n"
        "- ingress protection: IP67\n"
        "- operating temperature: -40 to 85 °C"
    )
    assert vs100.warnings == (
        'call get_product_spec with sku "LUM-VS-100" first, and answer only from what the tools return.',
    )
    price = await engine.run("products", "How much is the wireless one?", vs100.session_id, context=context)
    assert price.message == "The VS-200 costs $349.00."
    assert price.warnings == (
        "quote only prices that get_product_spec returned: call it for each product you give a price for, "
        "and copy the price.",
    )
    lines = await transcript_lines(engine, vs100.session_id or "", width=30)
    assert lines[:2] == [
        "Lookup | user: What's the range of the vs-100",
        "Lookup | assistant [direct]: **VS-100 vibration sensor** (L",
    ]


async def test_without_a_sku_the_catalog_answers_from_the_words_of_the_question() -> None:
    engine = FlowEngine(
        [ProductFlow],
        model=ScriptedModel(
            [
                "Our sensors go up to 100 g.",
                "I'm sorry, we don't carry that.",  # corrected once, still no lookup: the catalog answers
                "We have a wireless gateway for $99.",
                "Sorry, no.",
            ]
        ),
    )
    sensors = await engine.run("products", "How far do your vibration sensors measure?")
    assert sensors.message == (
        "These products of our catalog match:\n"
        "- **VS-100 vibration sensor** (LUM-VS-100), $189.00\n"
        "- **VS-200 wireless vibration sensor** (LUM-VS-200), $349.00"
    )
    nothing = await engine.run("products", "How much is the wireless gateway?", sensors.session_id)
    assert nothing.message.startswith("I can only answer from our catalog. Which product do you mean?")
    assert catalog_words("Wireless GATEWAYS, any?") == ["wireless", "gateway"]


async def test_a_goodbye_answered_in_words_is_steered_to_the_end() -> None:
    model = ScriptedModel(
        ["You're welcome! Have a great day!", ToolCall("terminate_session", {}), "Goodbye!"]
    )
    engine = FlowEngine([ProductFlow], model=model)
    result = await engine.run("products", "thanks, bye")
    assert result.completed and result.message == "Goodbye!"
    assert result.warnings == ("the user is saying goodbye: call terminate_session to end the conversation.",)
