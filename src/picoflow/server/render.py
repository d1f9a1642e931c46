"""Model output to HTML that is safe to insert into the chat page.

Model text is untrusted: a prompt injection can make a model write ``<script>`` or a
``javascript:`` link. Markdown is therefore rendered with raw HTML turned off (so any tag in the
text comes out escaped), links limited to a few schemes, and images dropped (an image URL would
let model output make the browser call any server). GitHub tables, strikethrough, code and lists
stay, because flows reply with comparison tables and code.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

__all__ = ["is_json", "render_markdown", "render_reply"]

_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})


def _link_allowed(url: str) -> bool:
    scheme = urlsplit(url.strip()).scheme.lower()
    # No scheme means a relative link or an anchor, which stays on this page's origin.
    return scheme == "" or scheme in _SAFE_SCHEMES


def _open_link_outside(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    # The chat must survive a click, and the target page must not get a handle on this one.
    token.attrSet("target", "_blank")
    token.attrSet("rel", "noopener noreferrer nofollow")
    return renderer.renderToken(tokens, idx, options, env)


def _build() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")
    md.validateLink = _link_allowed  # type: ignore[method-assign]
    md.add_render_rule("link_open", _open_link_outside)
    return md


_MARKDOWN = _build()


# Table alignment comes out as inline styles, which the page's Content Security Policy blocks.
# Raw HTML is escaped, so this exact attribute can only come from the table renderer.
_ALIGN = re.compile(r' style="text-align:(left|right|center)"')


def render_markdown(text: str) -> str:
    """GitHub-flavoured Markdown (tables, strikethrough, code, lists) as HTML; raw HTML is escaped."""
    rendered: str = _MARKDOWN.render(text)
    return _ALIGN.sub(r' class="align-\1"', rendered)


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _pretty_json(text: str) -> str:
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def render_reply(content: str, content_type: str = "text/plain") -> str:
    """HTML for one reply, chosen by its content type.

    Plain text is rendered as Markdown because that is what models write; JSON is pretty-printed;
    any other type (XML, CSV, HTML produced by a tool, ...) is shown verbatim as escaped source.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("", "text/plain", "text/markdown"):
        return render_markdown(content)
    if is_json(media):
        body = html.escape(_pretty_json(content), quote=False)
        return f'<pre class="json"><code class="language-json">{body}</code></pre>\n'
    body = html.escape(content, quote=False)
    return f'<pre class="raw" data-content-type="{html.escape(media)}"><code>{body}</code></pre>\n'
