"""The review pipeline as code: ``workflow.yaml``'s steps as one ``@workflow`` function.

The same steps at the same paths (``collect.visit[0]``, ``review.visit[0][quickstart]
.reviewer``, ``editor.visit[0]``, ...) and the same output as the LWIR document, given the
same models: ``tests/examples/test_code_forms.py`` runs both and compares them. What the
document says with ``maxVisits`` and ``next:``, the body says with a ``for`` loop and
``max_visits``; the editor is a ``ctx.decide`` (LWIR's ``decision`` with an agent) and the
body follows its route with an ``if``; the documents still travel through the run's
working copy, so the step functions are ``setup.py``'s. Run it with::

    little-workflow --setup examples.review_pipeline.setup:setup \\
        run examples.review_pipeline.workflow:review_pipeline \\
        --input '{"documents": "examples/review_pipeline/documents",
                  "workspace": ".little-workflow/review-workspace"}'
"""

from __future__ import annotations

import json
from typing import Any

from examples.review_pipeline import setup as steps
from little_workflow import JsonValue, WorkflowContext, current_step, step, workflow

__all__ = ["review_pipeline"]

#: Rounds of review at most (``maxVisits: 3`` of ``collect``, ``review`` and ``editor``).
ROUNDS = 3

# The prompts are workflow.yaml's, word for word: a real model sees the same requests.
REVIEWER = (
    "You review one document against the house style guide. Run check_style on its text "
    'first. Then answer with JSON only: {"id": <the document\'s id>, "verdict": "approve" '
    'or "revise", "issues": [<one short instruction per problem, such as drop "simply">]}. '
    "Ask for a revision when the checker finds banned words or long sentences.\n"
)
EDITOR = (
    "You are the editor of a documentation set. You get one review per document. Approve "
    "the set when every review approves; otherwise send it back for revision with a note "
    "for the writer.\n"
)
WRITER = (
    "You revise documents. Act on each issue the reviewers raised and change nothing else. "
    'Answer with JSON only: {"documents": [{"id": <id>, "text": <the whole revised text>}]}, '
    "listing only the documents you changed.\n"
)


@step(name="collect", max_visits=ROUNDS)
def collect(documents: str, workspace: str) -> dict[str, Any]:
    """``setup.collect``: the run's working copy at the head of a round."""
    return steps.collect(documents, workspace, current_step())


@step(name="save", max_visits=ROUNDS - 1)
def save(revised: dict[str, Any], workspace: str) -> list[str]:
    """``setup.save``: the writer's revisions into the working copy."""
    return steps.save(revised, workspace, current_step())


@step(name="publish")
def publish(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``setup.publish``: the approved set, as artifacts of the run."""
    return steps.publish(documents, current_step())


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _object(name: str, answer: JsonValue) -> dict[str, Any]:
    """An agent's JSON answer, which must be an object (a model may answer anything)."""
    if not isinstance(answer, dict):
        raise TypeError(f"{name} answered {answer!r}, not a JSON object")
    return answer


async def reviewer(branch: WorkflowContext, item: dict[str, Any]) -> Any:
    """One branch of the review map: a reviewer agent on one document of a round."""
    prompt = {"id": item["id"], "round": item["round"], "text": item["text"]}
    return await branch.agent(
        "reviewer",
        prompt=_json(prompt),
        instructions=REVIEWER,
        tools=["check_style"],
        max_turns=4,
        output="json",
    )


@workflow(name="review-pipeline")
async def review_pipeline(ctx: WorkflowContext, documents: str, workspace: str) -> dict[str, Any]:
    """Review every document, let the editor approve or send the set back, at most three
    rounds; publish the approved set."""
    for _ in range(ROUNDS):
        found = await ctx.step(collect, documents, workspace)

        reviews = await ctx.branches(
            reviewer,
            [{**document, "round": found["round"]} for document in found["documents"]],
            key=lambda item: str(item["id"]),
            concurrency=2,
            name="review",
            max_visits=ROUNDS,
        )
        decision = await ctx.decide(
            "editor",
            prompt=_json(reviews),
            routes=["approve", "revise"],
            instructions=EDITOR,
            max_visits=ROUNDS,
        )
        editor = _object("editor", decision.output)
        if decision.route == "approve":
            published = await ctx.step(publish, found["documents"])
            return {
                "published": published,
                "editor": editor,
                "reviews": reviews,
                "documents": found["documents"],
            }
        brief = {"note": editor["note"], "reviews": reviews}
        brief["documents"] = found["documents"]
        revised = _object(
            "revise",
            await ctx.agent(
                "writer",
                name="revise",
                prompt=_json(brief),
                instructions=WRITER,
                output="json",
                max_visits=ROUNDS - 1,
            ),
        )
        await ctx.step(save, revised, found["workspace"])
    raise RuntimeError(f"the editor did not approve the set in {ROUNDS} rounds")
