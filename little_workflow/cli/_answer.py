"""``little-workflow answer``: give the answer a suspended execution is waiting for."""

from __future__ import annotations

from typing import Any

import click

from little_workflow.cli._checkpoints import checkpoint_storage, checkpoints_option
from little_workflow.cli._main import Options, execute


@click.command()
@click.argument("execution_id")
@click.argument("prompt_id")
@click.argument("text")
@checkpoints_option
@click.pass_obj
def answer(
    options: Options, *, execution_id: str, prompt_id: str, text: str, checkpoints: str | None
) -> None:
    """Answer PROMPT_ID of EXECUTION_ID with TEXT; the next resume continues with it."""

    async def work() -> Any:
        from little_workflow.durable import create_checkpoint_store
        from little_workflow.errors import ConfigError
        from little_workflow.harness import answer_key

        async with checkpoint_storage(options, checkpoints) as (storage, url):
            snapshot = await create_checkpoint_store(storage=storage).load(execution_id)
            if snapshot is None:
                raise ConfigError(
                    f"there is no checkpoint of execution {execution_id!r} in {url}",
                    code="execution_not_found",
                )
            pending = [prompt.id for prompt in snapshot.ask_user]
            if prompt_id not in pending:
                raise ConfigError(
                    f"execution {execution_id!r} has no pending prompt {prompt_id!r} "
                    f"(pending: {', '.join(pending) or 'none'})",
                    code="prompt_not_found",
                )
            await storage.set(answer_key(execution_id, prompt_id), {"text": text})

    execute(options, work)
    click.echo(
        f"answered {prompt_id} of {execution_id}; resume the execution to continue", err=True
    )
