"""``queue`` and ``model-limit``: the limits the workers enforce, kept in the store.

``queue set NAME --concurrency N --rate 60/m`` caps the submitted runs of queue NAME
(``submit --queue NAME``); ``model-limit set SLOT ...`` caps the model calls through
slot SLOT, in every process of the store (``storage/_limits.py``).
"""

from __future__ import annotations

from typing import Any

import click

from little_workflow.cli._main import Options, execute, print_json
from little_workflow.cli._runs import _runtime


def _rate(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    from little_workflow.errors import InvalidValueError
    from little_workflow.storage import Rate

    if value is None:
        return None
    try:
        return Rate.parse(value)
    except InvalidValueError as exc:
        raise click.BadParameter(exc.message) from exc


def _limit_options(function: Any) -> Any:
    function = click.option(
        "--rate",
        default=None,
        callback=_rate,
        help="At most COUNT starts per PERIOD, a sliding window: 60/m, 30/10s, 1000/h.",
    )(function)
    return click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=None,
        help="At most N at once, across every worker of the store.",
    )(function)


def _describe(concurrency: int | None, rate: object) -> str:
    from little_workflow.storage import Limit, Rate

    assert rate is None or isinstance(rate, Rate)
    return Limit(concurrency=concurrency, rate=rate).describe()


@click.group()
def queue() -> None:
    """Named queues of submitted runs and their limits: set, list, remove."""


@queue.command(name="set")
@click.argument("name")
@_limit_options
@click.pass_obj
def set_(
    options: Options,
    *,
    name: str,
    concurrency: int | None,
    rate: Any,
) -> None:
    """Create or change queue NAME: at most --concurrency of its runs held at once and
    --rate claims (a limit not given is removed)."""

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.set_queue(name, concurrency=concurrency, rate=rate)

    stored = execute(options, work)
    click.echo(f"queue {stored.name}: {stored.limit.describe()}")


@queue.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_(options: Options, *, as_json: bool) -> None:
    """List the queues (``default`` included) and their limits."""
    from little_workflow.cli._tables import print_table

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.queues()

    found = execute(options, work)
    if as_json:
        print_json([item.to_json() for item in found])
        return
    print_table(
        ["name", "concurrency", "rate"],
        [
            [
                item.name,
                "-" if item.limit.concurrency is None else str(item.limit.concurrency),
                "-" if item.limit.rate is None else str(item.limit.rate),
            ]
            for item in found
        ],
        "no queues",
    )


@queue.command()
@click.argument("name")
@click.pass_obj
def remove(options: Options, *, name: str) -> None:
    """Remove queue NAME's limits (runs queued on it are then claimed without limit)."""

    async def work() -> bool:
        async with _runtime(options) as runtime:
            return bool(await runtime.remove_queue(name))

    removed = execute(options, work)
    click.echo(f"queue {name} removed" if removed else f"no queue {name}")


@click.group(name="model-limit")
def model_limit() -> None:
    """Limits of the model calls through a model slot, in every process: set, list, remove."""


@model_limit.command(name="set")
@click.argument("slot")
@_limit_options
@click.pass_obj
def model_set(
    options: Options,
    *,
    slot: str,
    concurrency: int | None,
    rate: Any,
) -> None:
    """Limit the calls through model slot SLOT: --concurrency at once, --rate per period."""

    async def work() -> None:
        async with _runtime(options) as runtime:
            await runtime.set_model_limit(slot, concurrency=concurrency, rate=rate)

    execute(options, work)
    click.echo(f"model slot {slot}: {_describe(concurrency, rate)}")


@model_limit.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def model_list(options: Options, *, as_json: bool) -> None:
    """List the model slots that have limits."""
    from little_workflow.cli._tables import print_table

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.model_limits()

    found = execute(options, work)
    rows = [
        (
            slot,
            limit.concurrency,
            None if limit.rate is None else {"count": limit.rate.count, "per": limit.rate.per},
            limit.rate,
        )
        for slot, limit in sorted(found.items())
    ]
    if as_json:
        print_json([{"slot": s, "concurrency": c, "rate": r} for s, c, r, _ in rows])
        return
    print_table(
        ["slot", "concurrency", "rate"],
        [[s, "-" if c is None else str(c), "-" if r is None else str(r)] for s, c, _, r in rows],
        "no model limits",
    )


@model_limit.command(name="remove")
@click.argument("slot")
@click.pass_obj
def model_remove(options: Options, *, slot: str) -> None:
    """Remove model slot SLOT's limits."""

    async def work() -> bool:
        async with _runtime(options) as runtime:
            return bool(await runtime.remove_model_limit(slot))

    removed = execute(options, work)
    click.echo(f"model slot {slot}: limits removed" if removed else f"model slot {slot}: no limits")
