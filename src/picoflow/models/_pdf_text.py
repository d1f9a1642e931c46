"""The text of a PDF, for models that cannot read PDFs themselves (the embedded model, most
OpenAI-compatible servers).

``pypdf`` is pure Python, so this works wherever picoflow does. The text is capped (pages and
characters) because it goes into a prompt; what is left out is said in the text, so the model knows
the document goes on. A PDF that cannot be opened (damaged, or locked with a password) is refused
with ``AttachmentRefused`` naming the file, never quoting it. Extraction is slow next to a model
call's bookkeeping and a tool loop asks for the same file on every call, so the last few results
are kept, by the file's SHA-256.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict

from picoflow.exceptions import AttachmentRefused, ModelConfigurationError

MAX_PAGES = 50
"""Pages read at most; the rest of a longer PDF is left out (and said to be)."""
MAX_CHARS = 100_000
"""Characters of text kept at most (about 25,000 tokens of English)."""
NO_TEXT = "(this PDF has no text layer: it is probably scanned pages, which this model cannot read)"
_CACHED = 16

_cache: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()


def pdf_text(data: bytes, *, name: str, key: str | None = None) -> str:
    """The text of the PDF ``data`` (``name`` labels errors; ``key``, its SHA-256, caches it)."""
    if key is not None:
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
    text = _extract(data, name)
    if key is not None:
        with _lock:
            _cache[key] = text
            while len(_cache) > _CACHED:
                _cache.popitem(last=False)
    return text


def _extract(data: bytes, name: str) -> str:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError as error:
        # Not retryable: the operator must install the extra (the local one brings pypdf too).
        raise ModelConfigurationError(
            f"attachment {name!r} is a PDF, and reading its text needs pypdf: pip install 'picoflow-ai[pdf]'"
        ) from error

    where = f"attachment {name!r}"
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise AttachmentRefused(f"{where}: the PDF is locked with a password, so its text cannot be read")
        pages = reader.pages
        count = len(pages)
        texts: list[str] = []
        size = 0
        for page in list(pages)[:MAX_PAGES]:
            text = (page.extract_text() or "").strip()
            texts.append(text)
            size += len(text) + 2
            if size >= MAX_CHARS:
                break
    except AttachmentRefused:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        # What pypdf raises on a damaged file varies; its message may quote the file, so only the kind.
        raise AttachmentRefused(
            f"{where}: the PDF could not be read ({type(error).__name__}); is it damaged?"
        ) from error
    body = "\n\n".join(text for text in texts if text)
    if not body:
        return NO_TEXT
    read = len(texts)
    if len(body) > MAX_CHARS:
        body = body[:MAX_CHARS]
        return f"{body}\n[... the text is cut here, at {MAX_CHARS:,} characters, in page {read} of {count}]"
    if read < count:
        return f"{body}\n[... pages {read + 1} to {count} are left out]"
    return body
