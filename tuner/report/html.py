"""A finished tuning as one self-contained web page (`iree-tuner report DIR --html`): what the
report prints (the table, the verdict, the choices tried and why), in the terminal's own
colours, the plot embedded, the runs the directory's result store holds, and the command that
rebuilds the result. Nothing is fetched: the
styles are inline and the picture is data, so the page can be mailed or archived alone."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from rich.console import Console

from tuner.run_dir import write_file

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 2em; }}
pre, code {{ font-family: ui-monospace, monospace; font-size: 12px; }}
.report pre {{ white-space: pre; overflow-x: auto; background: #fafafa; padding: 1em; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
</style></head>
<body>
<h1>{title}</h1>
<section id="verdict"><h2>Verdict</h2><p>{verdict}</p></section>
<section id="report" class="report"><h2>Report</h2>{report}</section>
<section id="plot"><h2>Plot</h2>{plot}</section>
<section id="history"><h2>History</h2>{history}</section>
<section id="rebuild"><h2>Rebuild</h2><pre><code>{rebuild}</code></pre></section>
</body></html>
"""


def recording_console() -> Console:
    """A console that keeps what is printed on it, wide enough for every column, for the page."""
    return Console(record=True, width=240, soft_wrap=True, color_system="truecolor", file=io.StringIO())


def write_page(out: Path, title: str, verdict: str, console: Console, plot: Path | None, rebuild: str,
               history: Console | None = None) -> Path:
    """The page at `out`: `console`'s recorded output (rich's HTML, styles inline) between the
    verdict and the plot (`plot`, a PNG, embedded), the runs the directory's store holds
    (`history`'s recorded output, tuner.report.history) and the rebuild command."""
    report = console.export_html(inline_styles=True, code_format="<pre>{code}</pre>")
    runs = (history.export_html(inline_styles=True, code_format="<pre>{code}</pre>") if history is not None
            else "<p>no run recorded in this directory's result store</p>")
    picture = (f'<img alt="{html.escape(title)}" src="data:image/png;base64,'
               f'{base64.b64encode(plot.read_bytes()).decode()}">' if plot is not None and plot.is_file()
               else "<p>no plot</p>")
    write_file(out, PAGE.format(title=html.escape(title), verdict=html.escape(verdict), report=report, plot=picture, history=runs,
                                rebuild=html.escape(rebuild)))
    return out
