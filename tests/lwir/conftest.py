"""The issue's example workflow, in YAML and in JSON, shared by the LWIR tests."""

from __future__ import annotations

import pytest

EXAMPLE_YAML = """\
lwir: 1
name: review
steps:
  - {id: fetch, kind: execute, fn: "pkg.module:fetch", with: {query: "${input.query}"}, next: review-candidates}
  - id: review-candidates
    kind: map
    items: "${steps.fetch.output.candidates}"
    key: id                        # branch key: review-candidates[cand_123]
    body:
      - {id: worker, kind: execute, fn: "pkg.module:score", with: {candidate: "${item}"}}
    next: judge
  - {id: judge, kind: decision, fn: "pkg.module:judge", maxVisits: 3, routes: {revise: revise, accept: done}}
  - {id: revise, kind: execute, fn: "pkg.module:revise", maxVisits: 3, next: judge}
  - {id: done, kind: output, value: "${steps.judge.output}"}
"""  # noqa: E501 - the issue's text, verbatim

# The same document, keys in another order, as a person might write it in JSON.
EXAMPLE_JSON = """\
{
  "steps": [
    {"kind": "execute", "id": "fetch", "next": "review-candidates",
     "with": {"query": "${input.query}"}, "fn": "pkg.module:fetch"},
    {"body": [{"with": {"candidate": "${item}"}, "fn": "pkg.module:score",
               "kind": "execute", "id": "worker"}],
     "next": "judge", "key": "id", "items": "${steps.fetch.output.candidates}",
     "kind": "map", "id": "review-candidates"},
    {"routes": {"accept": "done", "revise": "revise"}, "maxVisits": 3,
     "fn": "pkg.module:judge", "kind": "decision", "id": "judge"},
    {"next": "judge", "maxVisits": 3, "fn": "pkg.module:revise", "kind": "execute", "id": "revise"},
    {"value": "${steps.judge.output}", "kind": "output", "id": "done"}
  ],
  "name": "review",
  "lwir": 1
}
"""


@pytest.fixture
def example_yaml() -> str:
    """The issue's example as YAML."""
    return EXAMPLE_YAML


@pytest.fixture
def example_json() -> str:
    """The issue's example as JSON."""
    return EXAMPLE_JSON
