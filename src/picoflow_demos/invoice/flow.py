"""InvoiceFlow: read an uploaded invoice, check its arithmetic, and save it once the user approves it.

The conversation rests in ``Desk``, a step without a model: code sends each message where it
belongs. A message with a file goes to ``Extract``, whose model only copies the invoice's fields
off the document, each as printed; code parses them (money in ``Decimal``, ISO dates, a currency
code), checks that the lines, the subtotal, the tax and the total add up, and shows the invoice as
Markdown tables with what it found. While an invoice waits for approval, ``Review``'s model reads
the answer as confirm, cancel, goodbye or a small patch of corrected fields, which code applies and
checks again. A confirm of an invoice that adds up moves to ``Save``, whose only tool, the approval-gated
``save_invoice``, its model proposes with the invoice's vendor, number, currency and total: the call
waits for the user's decision through ``FlowEngine.decide``, described by a summary code writes from
those values, and runs once, for the signed-in caller only. A message sent meanwhile withdraws it (no
typed answer saves anything). Any other message goes to ``Assist``, whose model reads it as "list my
invoices", goodbye, or something else.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from picoflow import (
    Approval,
    Flow,
    LogicStep,
    Outcome,
    Prompt,
    Reject,
    RunContext,
    Step,
    TerminateStep,
    ToolError,
    direct,
    direct_to,
    go,
    since_last_user,
    tool,
)
from picoflow.attachments import Attachment
from picoflow.exceptions import RunError
from picoflow.messages import Message, ModelResponse
from picoflow.slots import bears_out
from picoflow_demos._common import SAYS_GOODBYE
from picoflow_demos.invoice.arithmetic import findings, money
from picoflow_demos.invoice.corrections import ReviewAnswer, apply
from picoflow_demos.invoice.database import InvoicesDatabase, default_database
from picoflow_demos.invoice.reading import Invoice, InvoiceReading
from picoflow_demos.invoice.tables import CONFIRM_OR_CORRECT, CORRECT_FIRST, review_reply, saved_list

EXTRACT = Prompt.file("extract.md")
REVIEW = Prompt.file("review.md")
ASSIST = Prompt.file("assist.md")
SAVE = Prompt.file("save.md")

PDF = "application/pdf"
ASK_FOR_FILE = (
    "Please upload an invoice, as a PDF or an image (PNG, JPEG, WebP or GIF): I will read its vendor, "
    "dates, lines and totals, check the arithmetic and save it once you confirm. You can also ask me to "
    "list your saved invoices."
)
NOT_SIGNED_IN = "Please sign in first: saved invoices belong to a signed-in user."
NOT_CAUGHT = "I did not catch which field to change, or to what."
DROPPED = "OK, I dropped that invoice; nothing was saved. Upload another one whenever you like."
FAREWELL = "Goodbye! Your saved invoices stay here for next time."
LEFT_UNSAVED = "Goodbye! Invoice {number} from {vendor} was not saved; upload it again whenever you like."
NOT_SAVED = "OK, invoice {number} from {vendor} was not saved. {again}"
NOT_STARTED = "I could not start saving the invoice; nothing was saved. {again}"


def refusal(files: Sequence[Attachment]) -> str | None:
    """Why the files of this message cannot be read as an invoice, or None when they can."""
    if len(files) > 1:
        return "One invoice at a time, please: send a single PDF or image."
    [file] = files
    if file.media_type != PDF and not file.is_image:
        return (
            f"I read invoices from PDFs and images (PNG, JPEG, WebP or GIF), and {file.name} is "
            f"{file.media_type}. Nothing was read or saved; please upload the invoice as a PDF or an image."
        )
    return None


def database_for(ctx: RunContext[Any]) -> InvoicesDatabase:
    """The application's database when it passed one as deps, else the demo database."""
    return ctx.deps if isinstance(ctx.deps, InvoicesDatabase) else default_database()


class Desk(LogicStep):
    """Where the conversation rests between turns. State: ``draft`` (the invoice awaiting approval,
    or None), ``findings`` (what code found wrong with it), ``file`` and ``saved`` (the last save)."""

    memory = "invoice-desk"

    def run_logic(self) -> Outcome:
        files = self.context.attachments
        if files:
            refused = refusal(files)
            return direct(refused) if refused else go(Extract)
        if self.state.get("draft") is not None:
            return go(Review)
        return go(Assist)


class Extract(Step):
    """Copy the fields of the attached invoice; code parses, checks and shows them."""

    memory = "invoice-extract"
    output = InvoiceReading
    terminate_tool = False

    def prompt(self) -> str:
        return EXTRACT.text

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The message that carries the file, and nothing older: another invoice would only mislead.
        return since_last_user(memory)

    def on_response(self, reading: InvoiceReading) -> Outcome:
        self.erase_memory()
        invoice = Invoice.from_reading(reading)
        problems = findings(invoice)
        name = self.context.attachments[0].name if self.context.attachments else "your invoice"
        reply = review_reply(invoice, problems, f"Here is what I read on **{name}**:")
        return direct_to(Desk, reply).with_state(
            draft=invoice.model_dump(mode="json"), findings=problems, file=name
        )


class Review(Step):
    """Take the user's answer to the invoice shown: confirm, correct or cancel."""

    memory = "invoice-review"
    output = ReviewAnswer
    terminate_tool = False

    def prompt(self) -> str:
        return REVIEW.text

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory)

    async def on_response(self, answer: ReviewAnswer) -> Outcome:
        message = self.last_user_message or ""
        self.erase_memory()
        invoice = Invoice.model_validate(self.state_of(Desk)["draft"])
        if answer.answer == "goodbye" and bears_out(ReviewAnswer, "answer", "goodbye", message):
            # Leaving ends the session; the draft is not saved.
            reply = LEFT_UNSAVED.format(number=invoice.number or "(no number)", vendor=invoice.vendor or "?")
            return direct_to(InvoiceGoodbye, reply)
        if answer.corrections or answer.answer == "correct":
            changed, problems = apply(invoice, answer.corrections, message)
            if changed == invoice:
                return direct_to(Desk, f"{' '.join(problems) or NOT_CAUGHT} {CONFIRM_OR_CORRECT}")
            found = findings(changed)
            opening = " ".join(["Corrected. Here is the invoice now:", *problems])
            return direct_to(Desk, review_reply(changed, found, opening)).with_state(
                draft=changed.model_dump(mode="json"), findings=found
            )
        if answer.answer == "cancel":
            return direct_to(Desk, DROPPED).with_state(draft=None, findings=[])
        if answer.answer == "confirm":
            return self.ask_to_save(invoice)
        return direct_to(Desk, f"The invoice is not saved yet. {CONFIRM_OR_CORRECT}")

    def ask_to_save(self, invoice: Invoice) -> Outcome:
        if problems := findings(invoice):  # code saves only an invoice that is whole and adds up
            listed = "\n".join(f"- {problem}" for problem in problems)
            return direct_to(Desk, f"I cannot save it yet:\n{listed}\n\n{CORRECT_FIRST}")
        if not self.context.principal:
            return direct_to(Desk, NOT_SIGNED_IN)
        return go(Save)


def save_arguments(invoice: Invoice) -> dict[str, Any]:
    """The arguments ``save_invoice`` must be proposed with for ``invoice``, as JSON values."""
    total = None if invoice.total is None else str(invoice.total)
    return {"vendor": invoice.vendor, "number": invoice.number, "currency": invoice.currency, "total": total}


def same_invoice(args: Mapping[str, Any], invoice: Invoice) -> bool:
    """Whether proposed arguments name ``invoice``: its vendor, number, currency and total exactly."""
    try:
        total = Decimal(str(args.get("total")))
    except InvalidOperation:
        return False
    return (
        (args.get("vendor"), args.get("number"), args.get("currency"))
        == (invoice.vendor, invoice.number, invoice.currency)
        and invoice.total is not None
        and total == invoice.total
    )


def save_summary(args: Any) -> str:
    """What the user approves, written by code from the validated arguments (which ``Save`` only
    lets through when they are the draft's own)."""
    amount = f"{args.currency} {money(args.total)}" if args.currency else money(args.total)
    return f"Save invoice {args.number} from {args.vendor} ({amount})"


class Save(Step):
    """Propose saving the invoice of the Desk's draft; it is saved only once the user approves it."""

    memory = "invoice-save"
    terminate_tool = False
    crossing_message = "Propose saving the invoice."

    def on_enter(self) -> None:
        self.erase_memory()

    def draft(self) -> Invoice:
        return Invoice.model_validate(self.state_of(Desk)["draft"])

    def prompt(self) -> str:
        return SAVE.render(arguments=json.dumps(save_arguments(self.draft()), ensure_ascii=False))

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory)

    def check_response(self, response: ModelResponse) -> Reject | None:
        # The only proposal that may wait for the user's decision: this draft's save, alone.
        calls = response.tool_calls
        if len(calls) == 1 and calls[0].name == "save_invoice":
            args = calls[0].args
            if isinstance(args, Mapping) and same_invoice(args, self.draft()):
                return None
        arguments = json.dumps(save_arguments(self.draft()), ensure_ascii=False)
        return Reject(f"Call save_invoice with {arguments}, and nothing else.")

    # The values come from the attached document, not from words typed: code checks them against
    # it and a person approves the saving, so they are not matched against the user's words.
    @tool(approval=True, approval_summary=save_summary, grounded=False)
    async def save_invoice(
        self, vendor: str, number: str, currency: str | None, total: Decimal, ctx: RunContext[Any]
    ) -> Outcome:
        """Save the invoice shown to the user, once they approve it."""
        invoice = self.draft()
        if not same_invoice(
            {"vendor": vendor, "number": number, "currency": currency, "total": total}, invoice
        ):
            raise ToolError(f"Only the invoice shown can be saved: {json.dumps(save_arguments(invoice))}.")
        if problems := findings(invoice):
            listed = "\n".join(f"- {problem}" for problem in problems)
            return direct_to(Desk, f"I cannot save it yet:\n{listed}\n\n{CORRECT_FIRST}")
        principal = ctx.principal
        if not principal:
            return direct_to(Desk, NOT_SIGNED_IN)
        if ctx.idempotency_key is None:
            raise ToolError("An invoice is saved only once it is approved.")
        result = await asyncio.to_thread(
            database_for(ctx).save, principal, invoice, reference=ctx.idempotency_key
        )
        saved = result.saved
        what = f"invoice {saved.number} from {saved.vendor} ({saved.currency} {money(saved.total)})"
        if result.status == "already_saved":
            on = saved.saved_on.isoformat()
            reply = f"You had already saved {what} on {on} as #{saved.id}; it is kept once."
        else:
            reply = f"Saved {what} as #{saved.id}. Upload another invoice, or ask me to list your invoices."
        return direct_to(Desk, reply).with_state(
            draft=None, findings=[], saved={"id": saved.id, "status": result.status}
        )

    def on_denied(self, approval: Approval) -> Outcome:
        # Denied, expired, or withdrawn by a new message (which the Desk then sends where it belongs):
        # the draft stays, to be corrected, confirmed again or dropped.
        invoice = self.draft()
        return direct_to(
            Desk, NOT_SAVED.format(number=invoice.number, vendor=invoice.vendor, again=CONFIRM_OR_CORRECT)
        )

    def on_model_error(self, error: RunError) -> Outcome:
        return direct_to(Desk, NOT_STARTED.format(again=CONFIRM_OR_CORRECT))


class Request(BaseModel):
    """What a message without a file asks for."""

    action: Annotated[Literal["list", "goodbye", "other"], SAYS_GOODBYE] = Field(
        description="list: show their saved invoices; goodbye: they end the conversation; "
        "other: anything else"
    )


class Assist(Step):
    """Answer a message that carries no invoice: list the saved ones, say goodbye, or ask for a file."""

    memory = "invoice-assist"
    output = Request
    terminate_tool = False

    def prompt(self) -> str:
        return ASSIST.text

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory)

    async def on_response(self, request: Request) -> Outcome:
        said = self.last_user_message or ""
        self.erase_memory()
        if request.action == "goodbye" and bears_out(Request, "action", "goodbye", said):
            return direct_to(InvoiceGoodbye, FAREWELL)
        if request.action != "list":  # a goodbye without a word of one is no goodbye
            return direct_to(Desk, ASK_FOR_FILE)
        principal = self.context.principal
        if not principal:
            return direct_to(Desk, NOT_SIGNED_IN)
        saved = await asyncio.to_thread(database_for(self.context).list_invoices, principal)
        return direct_to(Desk, saved_list(saved))


class InvoiceGoodbye(TerminateStep):
    """Closing words."""

    memory = "invoice-goodbye"


class InvoiceFlow(Flow):
    """Read uploaded invoices, check their arithmetic, and save the approved ones."""

    name = "invoice"
    steps = [Desk, Extract, Review, Assist, Save, InvoiceGoodbye]
