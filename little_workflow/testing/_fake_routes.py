"""Which API a request to ``FakeModelServer`` speaks, and what it must carry to be let in.

The routes, by platform:

* ``openai``: ``POST /v1/chat/completions`` and ``/chat/completions``;
* ``azure``: ``/openai/deployments/<name>/chat/completions`` (``AzureOpenAI``), the key
  in an ``api-key`` header;
* ``anthropic``: ``POST /v1/messages``, with an ``anthropic-version`` header;
* ``vertex``: ``/v1/projects/<project>/locations/<region>/publishers/anthropic/models/
  <model>:rawPredict`` and ``:streamRawPredict`` (``AnthropicVertex``): an OAuth bearer
  token, the model in the path, the version in the body's ``anthropic_version``;
* ``bedrock``: ``/model/<modelId>/invoke`` and ``/invoke-with-response-stream``
  (``AnthropicBedrock``): AWS Signature V4 (``_fake_aws``), the model in the path,
  the version in the body, and no ``stream`` field (the path says it).

The two clouds answer in the Messages wire: ``messages_body`` turns what they were sent
into the Messages body the direct API would have had, so one validator and one script
serve all three.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from little_workflow.testing._fake_wire import WireError

__all__ = [
    "Platform",
    "Route",
    "Wire",
    "anthropic_version_error",
    "messages_body",
    "presented_credential",
    "route",
    "vertex_credential",
]

Wire = Literal["openai", "anthropic"]
Platform = Literal["openai", "azure", "anthropic", "vertex", "bedrock"]

_ANTHROPIC_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")
#: The first version of the Messages API; SDK releases move to later dates.
_FIRST_ANTHROPIC_VERSION = datetime.date(2023, 6, 1)
#: The versions each cloud documents for ``anthropic_version``; the SDKs send a date.
_CLOUD_VERSIONS = {"vertex": "vertex-2023-10-16", "bedrock": "bedrock-2023-05-31"}

_DIRECT: dict[str, tuple[Wire, Platform]] = {
    "/v1/chat/completions": ("openai", "openai"),
    "/chat/completions": ("openai", "openai"),
    "/v1/messages": ("anthropic", "anthropic"),
}
_AZURE = re.compile(r"(?:/openai)?/deployments/[^/]+/chat/completions")
_VERTEX = re.compile(
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/"
    r"(?P<model>[^/:]+):(?P<specifier>rawPredict|streamRawPredict)"
)
_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/(?P<action>invoke|invoke-with-response-stream)")


@dataclass(frozen=True, slots=True)
class Route:
    """A known route: its wire, its platform, and what its path says."""

    wire: Wire
    platform: Platform
    #: The model named in the path (the clouds'), ``None`` where the body names it.
    model: str | None = None
    #: Whether the path asks for a stream (the clouds'), ``None`` where the body says.
    stream: bool | None = None


def route(method: str, path: str) -> Route | None:
    """The route ``method path`` (without the query) reaches; ``None``: no such route."""
    if method != "POST":
        return None
    if path in _DIRECT:
        return Route(*_DIRECT[path])
    if _AZURE.fullmatch(path):
        return Route("openai", "azure")
    if found := _VERTEX.fullmatch(path):
        model = urllib.parse.unquote(found["model"])
        return Route("anthropic", "vertex", model, found["specifier"] == "streamRawPredict")
    if found := _BEDROCK.fullmatch(path):
        model = urllib.parse.unquote(found["model"])
        return Route("anthropic", "bedrock", model, found["action"] != "invoke")
    return None


def anthropic_version_error(version: object, platform: Platform = "anthropic") -> str | None:
    """Why a Messages version is refused; ``None`` for a dated one (or the cloud's own).

    The header ``anthropic-version`` for the direct API, the body's ``anthropic_version``
    for the clouds (which also take their documented ``vertex-2023-10-16`` and
    ``bedrock-2023-05-31``).
    """
    name = "anthropic-version" if platform == "anthropic" else "anthropic_version"
    if not version:
        return f"{name}: {'header' if platform == 'anthropic' else 'field'} is required"
    if not isinstance(version, str):
        return f"{name}: Input should be a valid string"
    if version == _CLOUD_VERSIONS.get(platform):
        return None
    try:
        dated = (
            datetime.date.fromisoformat(version) if _ANTHROPIC_VERSION.fullmatch(version) else None
        )
    except ValueError:  # 2023-13-40: the form of a date, but none
        dated = None
    if dated is None or dated < _FIRST_ANTHROPIC_VERSION:
        return (
            f"{name}: {version[:40]!r} is not a valid version "
            f"(a date, {_FIRST_ANTHROPIC_VERSION.isoformat()} or later)"
        )
    return None


def messages_body(route: Route, body: Any) -> Any:
    """The Messages body a cloud's request stands for (the model and stream from the path).

    Any other route's body is returned as it came. ``WireError`` for a cloud request
    the cloud would refuse: no or a bad ``anthropic_version``; on Bedrock, a ``model`` or
    ``stream`` field.
    """
    if route.platform not in ("vertex", "bedrock"):
        return body
    if not isinstance(body, dict):
        raise WireError(400, "There was an issue with the JSON body of your request.")
    refused = anthropic_version_error(body.get("anthropic_version"), route.platform)
    if refused is not None:
        raise WireError(400, refused)
    if route.platform == "bedrock":
        # Bedrock's path holds both, and it refuses a body that has them too; Vertex's
        # takes ``stream`` in the body as well, and the path's model is the one used.
        extraneous = [name for name in ("model", "stream") if name in body]
        if extraneous:
            raise WireError(400, f"extraneous key [{extraneous[0]}] is not permitted")
    rebuilt: dict[str, Any] = {k: v for k, v in body.items() if k != "anthropic_version"}
    rebuilt["model"] = route.model
    rebuilt["stream"] = bool(route.stream)
    return rebuilt


def vertex_credential(headers: Mapping[str, str], api_key: str, *, echo: bool) -> str | None:
    """Why Vertex AI refuses the request's bearer token; ``None``: it is the one required."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return (
            "Request is missing required authentication credential. Expected OAuth 2 access "
            "token, login cookie or other valid authentication credential."
        )
    token = token.strip()
    if token == api_key:
        return None
    shown = token if echo else f"{token[:3]}***{token[-4:]}"
    return f"Request had invalid authentication credentials: {shown}"


def _openai_credential(headers: Mapping[str, str]) -> tuple[str, str] | str:
    authorization = headers.get("authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        return "API key", token.strip() if scheme.lower() == "bearer" else authorization
    if headers.get("api-key"):
        return "api-key", headers["api-key"]  # Azure OpenAI's header
    return (
        "You didn't provide an API key. You need to provide your API key in an "
        "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
    )


def presented_credential(wire: Wire, headers: Mapping[str, str]) -> tuple[str, str] | str:
    """The credential a direct request presents, as (what it is, the key); or why none."""
    if wire == "openai":
        return _openai_credential(headers)
    if headers.get("x-api-key"):
        return "x-api-key", headers["x-api-key"]
    authorization = headers.get("authorization", "")
    if not authorization:
        return "x-api-key header is required"
    # The official SDK sends ``Authorization: Bearer`` for ``api_key=`` as well as for
    # ``auth_token=``; the real API takes either header.
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return "invalid authorization header: expected the Bearer scheme"
    return "bearer token", token.strip()
