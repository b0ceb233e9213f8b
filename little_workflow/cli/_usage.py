"""The usage section of ``show``: a run's tokens and cost, paid and replayed, as lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from little_workflow.views import UsageReport, UsageTotals

__all__ = ["prices_option", "tokens_text", "usage_lines"]


def prices_option(shows: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--prices FILE``: the price table that costs the model usage ``shows``."""
    return click.option(
        "--prices",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="A price table (TOML, or .json) per model id, per million tokens: "
        f"{shows} cost for the models it prices (docs/usage.md).",
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def tokens_text(totals: UsageTotals) -> str:
    """``3 calls  in 600 (cached 40, cache write 50)  out 60 (reasoning 12)  cost 0.0012``."""
    parts = []
    if totals.cached_input_tokens:
        parts.append(f"cached {totals.cached_input_tokens}")
    if totals.cache_write_tokens:
        parts.append(f"cache write {totals.cache_write_tokens}")
    inside = f" ({', '.join(parts)})" if parts else ""
    reasoning = f" (reasoning {totals.reasoning_tokens})" if totals.reasoning_tokens else ""
    cost = (
        "cost unknown" if totals.cost is None else f"cost {totals.cost:.6f}".rstrip("0").rstrip(".")
    )
    if totals.cost is None and totals.unpriced_calls < totals.calls:
        cost += f" ({_plural(totals.unpriced_calls, 'call')} of unpriced models)"
    return (
        f"{_plural(totals.calls, 'call')}  in {totals.input_tokens}{inside}  "
        f"out {totals.output_tokens}{reasoning}  {cost}"
    )


def usage_lines(report: UsageReport) -> list[str]:
    """What ``show`` prints about the run's model usage (docs/usage.md defines the terms)."""
    total = report.total_paid
    if total.calls == 0 and report.interrupted == 0 and report.open == 0:
        return ["usage: no model calls"]
    lines = ["usage (paid: answers this run's processes got from the model; replayed: "]
    lines[0] += "answers a resumed process had from the log, not paid again):"
    lines.append(f"  paid      {tokens_text(report.paid)}")
    lines.append(f"  replayed  {tokens_text(report.replayed)}")
    if report.copied.calls:
        lines.append(f"  copied by the fork  {tokens_text(report.copied)}")
    if report.interrupted:
        lines.append(
            f"  interrupted  {_plural(report.interrupted, 'call')} cut off mid-call "
            "(maybe paid; the log has no usage for them)"
        )
    if report.open:
        lines.append(f"  open  {_plural(report.open, 'call')} without an answer yet")
    if report.by_slot:
        lines.append("  by slot:")
        models = {call.slot: call.model for call in report.calls}
        for slot, totals in report.by_slot.items():
            lines.append(f"    {slot} ({models.get(slot) or '?'})  {tokens_text(totals)}")
    if report.by_step:
        lines.append("  by step:")
        lines += [f"    {path}  {tokens_text(totals)}" for path, totals in report.by_step.items()]
    if len(report.passes) > 1:
        lines.append("  by pass:")
        for item in report.passes:
            cut = f"  interrupted {item.interrupted}" if item.interrupted else ""
            lines.append(
                f"    {item.number} {item.reason}  paid {tokens_text(item.paid)}  "
                f"replayed {item.replayed.calls} calls, "
                f"{item.replayed.total_tokens} tokens{cut}"
            )
    if report.sub_runs:
        lines.append(f"  with its sub-runs: paid {tokens_text(total)}")
        lines.append(f"  with its sub-runs: replayed {tokens_text(report.total_replayed)}")
    return lines
