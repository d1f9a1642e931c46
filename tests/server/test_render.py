"""Model output rendered for the chat page: GitHub Markdown kept, anything executable neutralised."""

from __future__ import annotations

from picoflow.server.render import is_json, render_markdown, render_reply


def test_github_tables_lists_and_code_render() -> None:
    html = render_markdown(
        "| Features | Hotel 1 | Hotel 2 |\n|---|---|---|\n| total | $700 | $650 |\n\n"
        "1. first\n2. second\n\n- a\n- b\n\n```python\nprint('x < y')\n```\n\n~~old~~ **bold** `code`"
    )
    assert "<table>\n<thead>\n<tr>\n<th>Features</th>" in html
    assert "<td>$650</td>" in html
    assert "<ol>\n<li>first</li>" in html and "<ul>\n<li>a</li>" in html
    assert "<pre><code class=\"language-python\">print('x &lt; y')\n</code></pre>" in html
    assert "<s>old</s> <strong>bold</strong> <code>code</code>" in html


def test_raw_html_in_model_output_is_escaped() -> None:
    html = render_markdown(
        "<script>alert(1)</script>\n\n<img src=x onerror=alert(2)> <b onclick=alert(3)>hi</b>\n\n"
        "| a |\n|---|\n| <iframe src=//evil></iframe> |"
    )
    assert "<script" not in html and "<img" not in html and "<b " not in html and "<iframe" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;iframe src=//evil&gt;&lt;/iframe&gt;" in html


def test_table_alignment_becomes_classes_the_page_styles() -> None:
    html = render_markdown("| a | b | c |\n|:---|:---:|---:|\n| 1 | 2 | 3 |")
    assert (
        '<td class="align-left">1</td>\n<td class="align-center">2</td>\n<td class="align-right">3</td>'
        in html
    )
    assert "style=" not in html
    # The same words written by the model stay text.
    assert (
        render_markdown('<td style="text-align:right">')
        == "<p>&lt;td style=&quot;text-align:right&quot;&gt;</p>\n"
    )


def test_only_safe_links_and_no_images() -> None:
    html = render_markdown(
        "[ok](https://example.com/a?b=1) [mail](mailto:x@example.com) [rel](/v1/flows) "
        "[js](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=) [vb](vbscript:x) "
        "![pixel](https://tracker.example/p.png)"
    )
    assert (
        '<a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">ok</a>'
        in html
    )
    assert 'href="mailto:x@example.com"' in html and 'href="/v1/flows"' in html
    assert "[js](javascript:alert(1))" in html and 'href="javascript' not in html
    assert 'href="data:' not in html and 'href="vbscript' not in html
    assert "<img" not in html


def test_replies_are_rendered_by_content_type() -> None:
    assert render_reply("**hi**") == "<p><strong>hi</strong></p>\n"
    assert render_reply("# Title", "text/markdown; charset=utf-8") == "<h1>Title</h1>\n"
    pretty = render_reply('{"b": [1, 2], "a": "<x>"}', "application/json")
    assert pretty == (
        '<pre class="json"><code class="language-json">'
        '{\n  "b": [\n    1,\n    2\n  ],\n  "a": "&lt;x&gt;"\n}</code></pre>\n'
    )
    assert "not json" in render_reply("not json", "application/json")
    raw = render_reply("<svg onload=alert(1)>", "image/svg+xml")
    assert raw == (
        '<pre class="raw" data-content-type="image/svg+xml"><code>&lt;svg onload=alert(1)&gt;</code></pre>\n'
    )
    assert is_json("application/problem+json") and not is_json("text/plain")
