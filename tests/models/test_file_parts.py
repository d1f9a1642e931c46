"""A user message's files as each provider receives them: sent through the official SDKs to the fake
servers, and read back from the JSON bodies those servers received."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from picoflow.attachments import Attachment
from picoflow.exceptions import AttachmentRefused
from picoflow.messages import Message, ModelRequest
from picoflow.models._file_parts import MissingAttachment
from picoflow.models._retry import RetryPolicy
from picoflow.models.anthropic import AnthropicModel
from picoflow.models.catalog import ModelSelection, resolve
from picoflow.models.google import GoogleModel
from picoflow.models.local._protocol import chat_messages
from picoflow.models.openai import OpenAIModel

from . import fake_responses as fr
from .fake_gemini import GeminiReply, gemini_response, gemini_serving
from .fake_servers import RecordingSleep, Reply, anthropic_message, fixed_random, openai_completion, serving
from .pdfs import pdf, png

PHOTO = Attachment.from_bytes(png(), "image/png", "photo.png")
INVOICE = Attachment.from_bytes(
    pdf(["Invoice 2024-117", "Total due: 42.00 EUR"], "Paid by transfer."), "application/pdf", "invoice.pdf"
)
NOTES = Attachment.from_bytes("Room 12: late checkout at 14:00 — café\n".encode(), "text/plain", "notes.txt")
INVOICE_TEXT = "Invoice 2024-117\nTotal due: 42.00 EUR\n\nPaid by transfer."
NOTES_TEXT = "Room 12: late checkout at 14:00 — café\n"
QUESTION = "What do these say?"


def user(text: str, *files: Attachment) -> Message:
    return replace(Message.user(text), attachments=tuple(file.ref() for file in files))


def request_with(*messages: Message, files: tuple[Attachment, ...]) -> ModelRequest:
    return ModelRequest("You are terse.", list(messages), files={file.sha256: file.data for file in files})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(file: Attachment) -> str:
    return f"data:{file.media_type};base64,{b64(file.data)}"


def from_data_url(url: str, media_type: str) -> bytes:
    prefix = f"data:{media_type};base64,"
    assert url.startswith(prefix)
    return base64.b64decode(url.removeprefix(prefix), validate=True)


def retry() -> RetryPolicy:
    return RetryPolicy(sleep=RecordingSleep(), random=fixed_random())


# --- each adapter, through its SDK, to its fake server ------------------------------------------

Send = Callable[[ModelRequest, list[Any]], Awaitable[None]]
"""Sends a request through an adapter; the JSON bodies the fake server received go into the list."""


async def via_responses(request: ModelRequest, received: list[Any]) -> None:
    with serving([Reply(body=fr.response([fr.message("Seen.")]))]) as server:
        model, _ = fr.make_model(server.url)
        try:
            await model.request(request)
        finally:
            await model.aclose()
            received.extend(server.bodies)


async def via_chat(request: ModelRequest, received: list[Any], provider: str = "openai") -> None:
    with serving([Reply(body=openai_completion("Seen."))]) as server:
        model = OpenAIModel(
            "gpt-4.1-mini", provider=provider, base_url=server.url, api_key="sk-test", retry=retry()
        )
        try:
            await model.request(request)
        finally:
            await model.aclose()
            received.extend(server.bodies)


async def via_compatible(request: ModelRequest, received: list[Any]) -> None:
    await via_chat(request, received, "openai-compatible")


async def via_ollama(request: ModelRequest, received: list[Any]) -> None:
    await via_chat(request, received, "ollama")


async def via_anthropic(request: ModelRequest, received: list[Any]) -> None:
    with serving([Reply(body=anthropic_message([{"type": "text", "text": "Seen."}]))]) as server:
        spec, params = resolve(ModelSelection("anthropic", "claude-haiku-4-5", {}))
        model = AnthropicModel(
            "claude-haiku-4-5",
            api_key="sk-ant-test",
            base_url=server.url,
            params=params,
            retry=retry(),
            spec=spec,
        )
        try:
            await model.request(request)
        finally:
            await model.aclose()
            received.extend(server.bodies)


async def via_gemini(request: ModelRequest, received: list[Any]) -> None:
    with gemini_serving([GeminiReply(body=gemini_response([{"text": "Seen."}]))]) as server:
        spec, params = resolve(ModelSelection("google", "gemini-2.5-flash", {}))
        model = GoogleModel(
            "gemini-2.5-flash",
            api_key="AIza-test",
            base_url=server.url,
            params=params,
            retry=retry(),
            spec=spec,
        )
        try:
            await model.request(request)
        finally:
            await model.aclose()
            received.extend(server.bodies)


@dataclass(frozen=True)
class Wire:
    """How one adapter's requests look on the wire."""

    send: Send
    user_turns: Callable[[Any], list[Any]]
    """The content of each user message in a received body, in order."""
    text: Callable[[str], dict[str, Any]]
    """The part a message's own text goes as."""
    parts: Callable[[Attachment], dict[str, Any]]
    """The part a file goes as."""


def _messages_of(role: str, key: str = "messages", content: str = "content") -> Callable[[Any], list[Any]]:
    return lambda body: [item[content] for item in body[key] if item.get("role") == role]


def _pdf_as_text(file: Attachment) -> dict[str, Any]:
    text = INVOICE_TEXT if file is INVOICE else NOTES_TEXT
    return {"type": "text", "text": f"[file {file.name}]\n{text}"}


def _responses_part(file: Attachment) -> dict[str, Any]:
    if file is PHOTO:
        return {"type": "input_image", "image_url": data_url(PHOTO), "detail": "auto"}
    if file is INVOICE:
        return {"type": "input_file", "filename": "invoice.pdf", "file_data": data_url(INVOICE)}
    return {"type": "input_text", "text": f"[file notes.txt]\n{NOTES_TEXT}"}


def _chat_part(file: Attachment) -> dict[str, Any]:
    if file is PHOTO:
        return {"type": "image_url", "image_url": {"url": data_url(PHOTO)}}
    if file is INVOICE:
        return {"type": "file", "file": {"filename": "invoice.pdf", "file_data": data_url(INVOICE)}}
    return _pdf_as_text(file)


def _compatible_part(file: Attachment) -> dict[str, Any]:
    return _chat_part(file) if file is PHOTO else _pdf_as_text(file)


def _anthropic_part(file: Attachment) -> dict[str, Any]:
    if file is PHOTO:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(PHOTO.data)},
        }
    if file is INVOICE:
        source = {"type": "base64", "media_type": "application/pdf", "data": b64(INVOICE.data)}
        return {"type": "document", "source": source, "title": "invoice.pdf"}
    source = {"type": "text", "media_type": "text/plain", "data": NOTES_TEXT}
    return {"type": "document", "source": source, "title": "notes.txt"}


def _gemini_part(file: Attachment) -> dict[str, Any]:
    if file is NOTES:
        return {"text": f"[file notes.txt]\n{NOTES_TEXT}"}
    # The SDK renames the part's key but passes the blob on as it is (its own typed parts too), and
    # writes bytes in URL-safe base64; the API reads proto JSON, where both spellings are accepted.
    data = base64.urlsafe_b64encode(file.data).decode("ascii")
    return {"inlineData": {"mime_type": file.media_type, "data": data}}


def _chat_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


WIRES = {
    "responses": Wire(
        via_responses,
        _messages_of("user", "input"),
        lambda t: {"type": "input_text", "text": t},
        _responses_part,
    ),
    "chat": Wire(via_chat, _messages_of("user"), _chat_text, _chat_part),
    "compatible": Wire(via_compatible, _messages_of("user"), _chat_text, _compatible_part),
    "ollama": Wire(via_ollama, _messages_of("user"), _chat_text, _compatible_part),
    "anthropic": Wire(via_anthropic, _messages_of("user"), _chat_text, _anthropic_part),
    "gemini": Wire(
        via_gemini, _messages_of("user", "contents", "parts"), lambda t: {"text": t}, _gemini_part
    ),
}


async def body_of(wire: Wire, request: ModelRequest) -> Any:
    received: list[Any] = []
    await wire.send(request, received)
    (body,) = received
    return body


# --- the parts each provider receives ------------------------------------------------------------


@pytest.mark.parametrize("name", WIRES)
async def test_text_first_then_one_part_per_file_in_attachment_order(name: str) -> None:
    wire = WIRES[name]
    body = await body_of(
        wire, request_with(user(QUESTION, PHOTO, INVOICE, NOTES), files=(PHOTO, INVOICE, NOTES))
    )
    (content,) = wire.user_turns(body)
    assert content == [wire.text(QUESTION), wire.parts(PHOTO), wire.parts(INVOICE), wire.parts(NOTES)]


async def test_responses_files_decode_to_the_bytes_sent() -> None:
    body = await body_of(
        WIRES["responses"], request_with(user(QUESTION, PHOTO, INVOICE), files=(PHOTO, INVOICE))
    )
    _, image, document = body["input"][0]["content"]
    assert from_data_url(image["image_url"], "image/png") == PHOTO.data
    assert from_data_url(document["file_data"], "application/pdf") == INVOICE.data


async def test_chat_completions_files_decode_to_the_bytes_sent() -> None:
    body = await body_of(WIRES["chat"], request_with(user(QUESTION, PHOTO, INVOICE), files=(PHOTO, INVOICE)))
    _, image, document = body["messages"][1]["content"]
    assert from_data_url(image["image_url"]["url"], "image/png") == PHOTO.data
    assert from_data_url(document["file"]["file_data"], "application/pdf") == INVOICE.data


async def test_a_compatible_server_gets_the_pdf_as_its_text_and_the_image_as_it_is() -> None:
    body = await body_of(
        WIRES["compatible"], request_with(user(QUESTION, INVOICE, PHOTO), files=(INVOICE, PHOTO))
    )
    _, document, image = body["messages"][1]["content"]
    assert document == {"type": "text", "text": f"[file invoice.pdf]\n{INVOICE_TEXT}"}
    assert from_data_url(image["image_url"]["url"], "image/png") == PHOTO.data


async def test_anthropic_files_decode_to_the_bytes_sent() -> None:
    body = await body_of(
        WIRES["anthropic"], request_with(user(QUESTION, PHOTO, INVOICE), files=(PHOTO, INVOICE))
    )
    _, image, document = body["messages"][0]["content"]
    assert base64.b64decode(image["source"]["data"], validate=True) == PHOTO.data
    assert base64.b64decode(document["source"]["data"], validate=True) == INVOICE.data


async def test_gemini_files_decode_to_the_bytes_sent() -> None:
    body = await body_of(
        WIRES["gemini"], request_with(user(QUESTION, PHOTO, INVOICE), files=(PHOTO, INVOICE))
    )
    _, image, document = body["contents"][0]["parts"]
    assert image["inlineData"]["mime_type"] == "image/png"
    assert base64.urlsafe_b64decode(image["inlineData"]["data"]) == PHOTO.data
    assert document["inlineData"]["mime_type"] == "application/pdf"
    assert base64.urlsafe_b64decode(document["inlineData"]["data"]) == INVOICE.data


@pytest.mark.parametrize("name", WIRES)
async def test_a_file_of_an_earlier_message_goes_again_with_that_message(name: str) -> None:
    wire = WIRES[name]
    request = request_with(
        user("Here is the invoice.", INVOICE),
        Message.assistant("Got it."),
        user("What is the total?"),
        files=(INVOICE,),
    )
    body = await body_of(wire, request)
    earlier, later = wire.user_turns(body)
    assert earlier == [wire.text("Here is the invoice."), wire.parts(INVOICE)]
    # A message without files keeps its plain form.
    assert later in ("What is the total?", [wire.text("What is the total?")])


@pytest.mark.parametrize("name", WIRES)
async def test_a_file_missing_from_the_request_fails_before_any_http_request(name: str) -> None:
    request = request_with(user(QUESTION, PHOTO, INVOICE), files=(PHOTO,))
    received: list[Any] = []
    with pytest.raises(MissingAttachment) as caught:
        await WIRES[name].send(request, received)
    assert received == []
    error = caught.value
    assert (error.kind, error.status, error.retryable) == ("internal", 500, False)
    assert "'invoice.pdf'" in str(error)


# --- the embedded model: files as text -----------------------------------------------------------


def test_the_embedded_model_reads_a_pdf_and_a_text_file_as_text() -> None:
    request = request_with(user(QUESTION, INVOICE, NOTES), files=(INVOICE, NOTES))
    assert chat_messages(request)[-1] == {
        "role": "user",
        "content": f"{QUESTION}\n\n[file invoice.pdf]\n{INVOICE_TEXT}\n\n[file notes.txt]\n{NOTES_TEXT}",
    }


def test_the_embedded_model_refuses_an_image_naming_it() -> None:
    request = request_with(user(QUESTION, INVOICE, PHOTO), files=(INVOICE, PHOTO))
    with pytest.raises(
        AttachmentRefused, match=r"'photo\.png' is an image, and this model cannot read images"
    ):
        chat_messages(request)


def test_the_embedded_model_fails_on_a_missing_file() -> None:
    with pytest.raises(MissingAttachment, match=r"'notes\.txt'"):
        chat_messages(request_with(user(QUESTION, NOTES), files=()))
