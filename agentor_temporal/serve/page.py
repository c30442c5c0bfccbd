"""The page at `GET /`: one self-contained HTML file, no build step, no external assets.

`page.html` starts a run (`POST /runs`), follows it with an `EventSource` on
`/runs/{run_id}/events?text=1`, and decides pending approvals with the
approval route. The run id lives in the URL's fragment, so a reload reopens
the run and rebuilds it from its first event; a lost connection (a server
restart) is resumed by the browser itself with `Last-Event-ID`, and the page
shows an event only if its position is past the last one shown.
"""

from __future__ import annotations

import json
from importlib import resources

_PLACEHOLDER = "/*AGENTS*/[]"

UNAUTHORIZED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentor-temporal: token needed</title></head>
<body style="font: 15px system-ui, sans-serif; max-width: 40em; margin: 3em auto">
<h1>A token is needed</h1>
<p>This server was started with <code>AGENTOR_SERVE_TOKEN</code>. Open
<code>/?token=YOUR_TOKEN</code> once; the page then keeps it in a cookie
for this site.</p>
</body></html>
"""


def render(agents: list[str]) -> str:
    """The page, knowing the names of the agents it can start runs of."""
    html = (
        resources.files("agentor_temporal.serve").joinpath("page.html").read_text(encoding="utf-8")
    )
    # `</` inside a script would end it early; JSON allows `<\/`
    names = json.dumps(agents).replace("</", "<\\/")
    return html.replace(_PLACEHOLDER, names, 1)
