"""Entry point of the ``little-workflow`` command."""

from __future__ import annotations

import click

from little_workflow import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="little-workflow")
def cli() -> None:
    """Durable execution for LLM-agent workflows."""


def main() -> None:
    """Run the command line."""
    cli()
