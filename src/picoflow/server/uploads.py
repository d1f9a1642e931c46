"""Files over HTTP: a turn's attachments as ``multipart/form-data`` or as base64 in JSON, and a
session's stored files listed and served to their owner.

A multipart body is never held whole: the form parser spools each file to a temporary file past
1 MiB, the body limit (``BodyLimit``) refuses a body over the upload limit while it arrives, and a
file over the per-file limit is refused (413) from its size before its bytes are read into memory.
A JSON body is parsed whole, so it is bounded by the same upload limit. Types are checked against
the bytes by the engine (415 for a type not accepted or contradicted by the bytes).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from picoflow.attachments import Attachment, AttachmentLimits, guess_media_type
from picoflow.server.errors import ApiError, engine_call, not_found
from picoflow.server.schemas import AttachmentOut, TurnRequest
from picoflow.server.state import AccessDep

__all__ = ["get_attachment", "is_form", "list_attachments", "read_form", "upload_limit"]

FIELD = "attachments"
"""The name of the file parts of a multipart turn, and of the list of files in a JSON turn."""
_FORM_FIELDS = ("message", "config", "stream")
_MAX_TEXT_FIELD = 4 * 1024 * 1024


def upload_limit(limits: AttachmentLimits, max_body_bytes: int) -> int:
    """The largest turn body: the files of a turn in base64 (a third larger than the bytes) and a
    body's worth of everything else."""
    return limits.max_turn_bytes * 4 // 3 + max_body_bytes


def is_form(request: Request) -> bool:
    return request.headers.get("content-type", "").lower().startswith("multipart/form-data")


async def read_form(request: Request, limits: AttachmentLimits) -> tuple[TurnRequest, list[Attachment]]:
    """A multipart turn: fields ``message``, ``config`` (JSON object), ``stream`` and any number of
    ``attachments`` file parts. 413 for a file over the limits, 422 for a malformed body or a part
    of another name."""
    try:
        async with request.form(
            max_files=limits.max_files, max_fields=len(_FORM_FIELDS) * 2, max_part_size=_MAX_TEXT_FIELD
        ) as form:
            fields: dict[str, Any] = {}
            uploads: list[UploadFile] = []
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    if name != FIELD:
                        raise _malformed(name, f"only '{FIELD}' parts may carry files")
                    uploads.append(value)
                elif name in _FORM_FIELDS:
                    if name in fields:
                        raise _malformed(name, "is given twice")
                    fields[name] = value
                elif name == FIELD:
                    raise _malformed(FIELD, "must be a file part (with a filename)")
                else:
                    # Refused rather than ignored: a misspelt field would be lost without a word.
                    known = ", ".join((*_FORM_FIELDS, FIELD))
                    raise _malformed(name or "(unnamed)", f"is not a part of a turn (the parts are {known})")
            body = _turn_body(fields)
            return body, await _attachments(uploads, limits)
    except HTTPException as exc:
        if exc.status_code != 400:
            raise  # the body limit's 413 and 408 keep their status
        if str(exc.detail).startswith("Too many files"):
            raise _too_large(f"a turn may carry at most {limits.max_files} files") from None
        # The form parser's own complaint (a broken boundary, too many parts): a malformed body.
        problem = f"is not valid multipart/form-data ({exc.detail})"
        raise ApiError(
            422, "invalid_input", f"invalid request: body {problem}", fields=[("body", problem)]
        ) from None


def _turn_body(fields: dict[str, Any]) -> TurnRequest:
    if "message" not in fields:
        raise _malformed("message", "is required")
    data: dict[str, Any] = {"message": fields["message"]}
    if "config" in fields:
        try:
            data["config"] = json.loads(fields["config"])
        except ValueError:
            raise _malformed("config", "is not valid JSON") from None
    if "stream" in fields:
        # As the document states it (a boolean part is "true" or "false"), not every word pydantic
        # would take for one ("0", "yes", "on").
        if fields["stream"] not in ("true", "false"):
            raise _malformed("stream", "must be true or false")
        data["stream"] = fields["stream"] == "true"
    try:
        return TurnRequest.model_validate(data)
    except ValidationError as exc:
        # Rendered by the app's handler, as FastAPI's own refusal of a JSON body would be.
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


async def _attachments(uploads: list[UploadFile], limits: AttachmentLimits) -> list[Attachment]:
    """The uploaded files, sizes checked before any is read into memory (they wait on disk)."""
    total = 0
    for upload in uploads:
        size = upload.size or 0
        total += size
        if size > limits.max_file_bytes:
            name = upload.filename or "attachment"
            raise _too_large(f"attachment {name!r} is larger than {limits.max_file_bytes} bytes")
    if total > limits.max_turn_bytes:
        raise _too_large(f"the files of one turn may total at most {limits.max_turn_bytes} bytes")
    files = []
    for upload in uploads:
        data = await upload.read()
        name = upload.filename or "attachment"
        files.append(Attachment.from_bytes(data, _declared_type(upload, data), name))
    return files


def _declared_type(upload: UploadFile, data: bytes) -> str:
    """The part's own type; a browser that knows none sends ``application/octet-stream``, and then
    the name's extension (or else the bytes) says it. The engine still checks it against the bytes."""
    declared = (upload.content_type or "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/octet-stream":
        return declared
    return guess_media_type(upload.filename or "", data)


def _malformed(field: str, problem: str) -> RequestValidationError:
    """A field of the form that breaks a rule, refused like any other malformed body (422)."""
    return RequestValidationError([{"loc": ("body", field), "msg": problem, "type": "value_error"}])


def _too_large(message: str) -> ApiError:
    return ApiError(413, "attachment_too_large", message, fields=[(f"body.{FIELD}", message)])


# --- a session's files ------------------------------------------------------------------------------------


async def list_attachments(session_id: str, access: AccessDep) -> list[AttachmentOut]:
    """The files sent in the session, each once, in the order first sent."""
    async with engine_call(session_id):
        refs = await access.engine.session_files(session_id, principal=access.caller.principal)
    if refs is None:
        raise not_found(session_id)
    return [AttachmentOut.from_ref(ref, session_id) for ref in refs]


async def get_attachment(session_id: str, sha256: str, access: AccessDep) -> Response:
    """A file's bytes, to the session's owner only (404 for anyone else, as for an unknown file)."""
    principal = access.caller.principal
    async with engine_call(session_id):
        file = await access.engine.session_file(session_id, sha256, principal=principal)
        # Which answer: another principal's session gets the one an unknown session gets.
        if file is None and await access.engine.get_session(session_id, principal=principal) is None:
            raise not_found(session_id)
    if file is None:
        raise ApiError(404, "attachment_not_found", "No such attachment.", session_id=session_id)
    # Stored bytes are users' uploads: shown inline only as what they are (no sniffing, no scripts),
    # and cacheable for long since a hash names them.
    disposition = "inline" if file.is_image or file.media_type == "application/pdf" else "attachment"
    headers = {
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(file.name, safe='')}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=86400, immutable",
    }
    return Response(file.data, media_type=file.media_type, headers=headers)
