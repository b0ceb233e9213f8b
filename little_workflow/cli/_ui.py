"""The ``ui`` command: serve the web UI for this data directory."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from little_workflow.cli._main import EXIT_INVALID, Options, refuse
from little_workflow.cli._usage import prices_option


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but loopback requires a token.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on; 0 picks a free one (the printed URL names it).",
)
@click.option(
    "--token",
    envvar="LITTLE_WORKFLOW_UI_TOKEN",
    default=None,
    help="Require this token on every request [env LITTLE_WORKFLOW_UI_TOKEN; generated "
    "when --host is not loopback].",
)
@click.option(
    "--open/--no-open", "open_browser", default=False, help="Open the UI in a web browser."
)
@prices_option("the run pages and the runs list show")
@click.pass_obj
def ui(
    options: Options,
    *,
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    prices: Path | None,
) -> None:
    """Serve the web UI (runs, steps, events, model and tool calls) until interrupted."""
    from little_workflow._extras import require
    from little_workflow.errors import ConfigError, MissingExtraError
    from little_workflow.views import load_prices

    try:
        require("ui", "little-workflow ui")
        table = None if prices is None else load_prices(prices)
    except (MissingExtraError, ConfigError) as exc:
        refuse(exc)
    from little_workflow.ui import serve

    def opened(url: str) -> None:
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    def announce(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()  # a script waiting for the URL reads it through a pipe

    try:
        serve(
            options.data_dir,
            store=options.store,
            host=host,
            port=port,
            token=token or None,
            prices=table,
            announce=announce,
            on_ready=opened,
        )
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_INVALID)
