"""The HTML base every report page is built on: one page shell, one style sheet, one escape.

Pages are self-contained (inline CSS and SVG, no network, no script), so a report can be mailed,
attached to an issue or opened on a machine with no internet.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from loaderdoctor.atomic import write_atomically
from loaderdoctor.report.html.chart import Line
from loaderdoctor.report.output import UNDECODABLE_NOTE, printable

# One colour per line, distinct to 32 workers: matplotlib's tab10 (its red left to incidents),
# then 22 picked one by one as far as possible (CIELAB) from those before them, from the
# incidents' red and from /dev/shm's purple; no two are closer than ΔE 25.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8",
    "#3030e8", "#e830e8", "#6cefb8", "#efad6c", "#22774d",
    "#30e830", "#8a0f4d", "#777022", "#ef6c82", "#b5da81",
    "#305ee8", "#8a2e0f", "#c11596", "#abe830", "#30e87d",
    "#0f0f8a", "#8815c1", "#ce6cef", "#223777", "#227777",
    "#c17915", "#da8f81",
)  # fmt: skip
INCIDENT_COLOR = "#d62728"
STATUS_COLORS = {
    "ok": "#2ca02c",
    "healed": "#e6a100",
    "healed-with-loss": "#e6550d",
    "crashed": "#d62728",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;
font-size:13px;vertical-align:middle;margin-left:8px}
.meta{color:#555;margin:2px 0}.meta code{background:#e9ebef;padding:1px 5px;border-radius:4px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 16px;margin:10px 0}
.card.incident{border-left:4px solid #d62728}.card.finding{border-left:4px solid #e6a100}
.card h3{margin:0 0 6px;font-size:15px}.cause{font-family:ui-monospace,monospace;color:#b31b1b}
.where{color:#444;margin:0 0 8px}ul{margin:4px 0 8px 0;padding-left:20px}
.fixes li{color:#185c22}pre{background:#f1f3f6;padding:8px;border-radius:6px;overflow:auto;
font-size:12px}table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #dde1e7;padding:4px 10px;text-align:left;font-size:13px}
th{background:#eef0f4}.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;
margin:4px 0 0}.swatch{display:inline-block;width:12px;height:3px;margin-right:5px;
vertical-align:middle}.plot{background:#fff;border:1px solid #dde1e7;border-radius:8px;
padding:8px 10px;margin:10px 0}.plot h3{margin:2px 0 4px;font-size:14px}
.muted{color:#777}svg text{font:11px system-ui,sans-serif;fill:#444}
td.num{text-align:right;font-variant-numeric:tabular-nums}td code{font-size:12px}
li code{background:#eef0f4;padding:0 4px;border-radius:3px;font-size:12px}
tr.died td{background:#fdecea}.died-tag{color:#b31b1b;font-weight:600}
"""


def escape(value: object) -> str:
    """Text (and attribute values) as HTML: ``<``, ``>``, ``&`` and both quotes escaped."""
    return html.escape(str(value), quote=True)


_CODE_SPAN = re.compile(r"`([^`]+)`")


def with_code(value: object) -> str:
    """Catalog text as HTML: escaped, and its Markdown code spans (```dataset[INDEX]```, the
    way the docs pages and the terminal show them) as ``<code>``, not as literal backticks."""
    return _CODE_SPAN.sub(r"<code>\1</code>", escape(value))


def legend(lines: Sequence[Line]) -> str:
    """A swatch and a label per chart line, under the chart."""
    items = "".join(
        f'<span><span class="swatch" style="background:{line.color}"></span>'
        f"{escape(line.label)}</span>"
        for line in lines
    )
    return f'<div class="legend">{items}</div>'


DOCS_URL_ENV = "LOADERDOCTOR_DOCS_URL"


def docs_href(relative: str, page_dir: str | Path | None) -> str | None:
    """A link to ``relative`` (``docs/causes/<id>.md``) from a page written in ``page_dir``.

    With ``$LOADERDOCTOR_DOCS_URL`` (where the repository's files are served, a web page or a
    mirror), that URL and ``relative``; else, in a source checkout, the path from ``page_dir``
    to the checkout's page, relative so that the folder of reports can move with the checkout
    and never names a local absolute path; else None (the caller shows the command that prints
    the page)."""
    if not relative:
        return None
    base = os.environ.get(DOCS_URL_ENV, "").strip()
    if base:
        return f"{base.rstrip('/')}/{quote(relative)}"
    if page_dir is None:
        return None
    import loaderdoctor

    page = Path(loaderdoctor.__file__).resolve().parents[2] / relative
    if not page.is_file():
        return None
    try:
        return quote(Path(os.path.relpath(page, Path(page_dir).resolve())).as_posix())
    except ValueError:  # Windows: the page and the report on different drives
        return None


def page(
    title: str,
    heading: str,
    body: Sequence[str],
    *,
    badge: tuple[str, str] | None = None,
) -> str:
    """The whole document: ``title`` (plain text), ``heading`` with an optional ``(words, colour)``
    badge, then ``body`` (HTML already escaped by the caller).

    Text the user's data brought in that is not UTF-8 is escaped here, once for the whole page,
    and a note at the end says so (see ``report.output``).
    """
    badge_html = ""
    if badge is not None:
        words, color = badge
        badge_html = f'<span class="badge" style="background:{color}">{escape(words)}</span>'
    document = "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
            f"<h1>{escape(heading)}{badge_html}</h1>",
            *body,
            "</main></body></html>\n",
        ]
    )
    clean, escaped = printable(document)
    if escaped:
        note = f'<p class="muted">Note: {escape(UNDECODABLE_NOTE)}.</p>'
        clean = clean.replace("</main></body></html>\n", f"{note}</main></body></html>\n")
    return clean


def write_page(document: str, path: str | Path) -> Path:
    """Write a page built by ``page`` atomically: a failure keeps the previous file whole."""
    return write_atomically(path, document)
