"""The report's HTML: one self-contained page, plain elements, inline CSS, no script and no outside request.

Its Content-Security-Policy allows images from data: URIs only and no connection at all, so a page
opened from a file browser fetches nothing even if a later edit adds a link to one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
.vidvol-report{font-family:system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:1rem 1.5rem;color:#222;
line-height:1.4}.vidvol-report h1{font-size:1.6rem}.vidvol-report h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;
margin-top:2rem}.vidvol-report table{border-collapse:collapse;margin:.5rem 0}.vidvol-report th,.vidvol-report td{
border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}.vidvol-report .n{text-align:right}
.vidvol-report pre{background:#f6f6f6;padding:.5rem;white-space:pre-wrap;font-size:.85rem;max-height:24rem;overflow:auto}
.vidvol-report dl{display:grid;grid-template-columns:max-content auto;gap:.1rem 1rem}.vidvol-report dt{font-weight:600}
.vidvol-report dd{margin:0}.vidvol-report figure{display:inline-block;margin:.3rem .6rem .6rem 0;vertical-align:top;
max-width:42rem}.vidvol-report figcaption{font-size:.8rem;max-width:42rem;overflow-wrap:anywhere}
.vidvol-report .ok{color:#176117;font-weight:600}.vidvol-report .bad{color:#a00;font-weight:600}
.vidvol-report .warn{color:#8a5a00;font-weight:600}.vidvol-report nav a{margin-right:.8rem}
.vidvol-report .names{font-family:monospace;font-size:.8rem;word-break:break-all}
.vidvol-report .gallery{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));gap:.4rem}
.vidvol-report .gallery figure{margin:0}.vidvol-report .gallery img{image-rendering:pixelated}
"""  # every rule under .vidvol-report: shown inside a notebook, the page leaves the notebook's own look alone
MANY_SKIPS = 40  # beyond this many entries the skip report is grouped by reason


def esc(value: Any) -> str:
    """Text escaped for HTML."""
    return escape(str(value), quote=True)


def human_bytes(n: int | float | None) -> str:
    """`12.3 MiB` (exact bytes below 1 KiB); `?` for None."""
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[int] = (), caption: str = "") -> str:
    """A table of escaped cells; columns in `numeric` right-aligned."""
    head = "".join(f'<th scope="col"{" class=n" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{esc(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def definitions(pairs: Iterable[tuple[str, Any]]) -> str:
    """A definition list of (term, value) pairs, escaped; pairs whose value is None are left out."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs if v is not None) + "</dl>"


def figure(uri: str, alt: str, caption: str, width: int | None = None) -> str:
    """An inlined image with its alt text and a caption, drawn `width` pixels wide when given."""
    size = f' width="{int(width)}"' if width else ""
    return f'<figure><img src="{uri}" alt="{esc(alt)}"{size}><figcaption>{esc(caption)}</figcaption></figure>'


def raw_figure(content: str, caption: str) -> str:
    """A figure around trusted markup (an inline SVG chart, images) with an escaped caption."""
    return f"<figure>{content}<figcaption>{esc(caption)}</figcaption></figure>"


def section(anchor: str, title: str, body: str) -> str:
    """A section with its heading (`<h2 id=...>`)."""
    return f'<section aria-labelledby="{esc(anchor)}"><h2 id="{esc(anchor)}">{esc(title)}</h2>{body}</section>'


def skips_html(skips: Sequence[dict[str, Any]], empty_splits: dict[str, str]) -> str:
    """The skip report: a table (source, split, reason) or, when long, one list of inputs per reason.

    Every skipped input's name is on the page either way; a masked part names the example it is in.
    """
    out = []
    if empty_splits:
        out.append("<p>Splits left without an example (not registered):</p>"
                   + table(["split", "why"], sorted(empty_splits.items())))
    if not skips:
        out.append("<p>Nothing was skipped: every input became an example.</p>")
        return "".join(out)
    inputs = [s for s in skips if not s.get("example")]
    parts = [s for s in skips if s.get("example")]
    out.append(f"<p>{len(inputs)} inputs skipped, {len(parts)} parts masked inside written examples "
               "(their frames are in the example, masked).</p>")

    def what(s):
        return "masked part of " + str(s["example"]) if s.get("example") else "input skipped"

    if len(skips) <= MANY_SKIPS:
        rows = [(s.get("source", "?"), s.get("split", "?"), what(s), s.get("reason", "?")) for s in skips]
        out.append(table(["source", "split", "what", "reason"], rows))
        return "".join(out)
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in skips:
        groups.setdefault(str(s.get("reason", "?")), []).append(s)
    out.append(table(["reason", "entries"], sorted(((r, len(g)) for r, g in groups.items()), key=lambda x: -x[1]),
                     numeric=[1], caption="skips by reason"))
    for k, (reason, group) in enumerate(sorted(groups.items(), key=lambda x: -len(x[1]))):
        names = "; ".join(f"{s.get('source', '?')} ({s.get('split', '?')}"
                          + (f", in {s['example']})" if s.get("example") else ")") for s in group)
        out.append(f'<h3 id="skip-reason-{k}">{esc(reason)} ({len(group)})</h3><p class="names">{esc(names)}</p>')
    return "".join(out)


def document(title: str, intro: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole page: head (charset, CSP, style), the title, a table of contents and the sections.

    Args:
      title: the page title (also its `<h1>`).
      intro: trusted markup under the title.
      sections: (anchor, heading, trusted body markup) per section.

    Returns:
      The HTML document.
    """
    nav = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t, _ in sections)
    body = "".join(section(a, t, b) for a, t, b in sections)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><div class=\"vidvol-report\">"
            f'<header><h1>{esc(title)}</h1>{intro}<nav aria-label="sections">{nav}</nav></header>'
            f"<main>{body}</main></div></body></html>\n")
