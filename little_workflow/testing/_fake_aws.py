"""Amazon Bedrock's side of ``FakeModelServer``: its credentials, errors and event stream.

Bedrock's runtime takes a Messages body at ``POST /model/<modelId>/invoke`` and streams
at ``/model/<modelId>/invoke-with-response-stream``, signed with AWS Signature V4. The
fake reads the signature's ``Credential=<access key id>/<date>/<region>/<service>/
aws4_request`` and compares the access key id with the key it requires; the signature
itself is not checked (that would need the secret key on both sides, and tests
botocore's signer, not ours). An unsigned request, or one with an unknown key, is
Bedrock's 403. A Bedrock API key (``Authorization: Bearer``) is taken too.

A streamed answer is AWS's binary event stream (``application/vnd.amazon.eventstream``),
written from its specification: each message is a prelude (total length, headers
length, both big-endian 32-bit, and the prelude's CRC32), the headers (a name of at
most 255 bytes, type 7 for a string, a 16-bit length, the value), the payload and the
CRC32 of all before it. An event's payload is ``{"bytes": base64(the JSON event)}``,
the Anthropic stream event whole; an error mid-stream is an ``exception`` message
whose ``:exception-type`` names the error (``throttlingException``) and whose payload
is ``{"message": ...}``. Errors outside a stream are ``{"message": ...}`` with the
error's name in ``x-amzn-ErrorType``.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = [
    "EVENT_STREAM",
    "bedrock_credential",
    "bedrock_error",
    "chunk_message",
    "exception_message",
    "message",
]

EVENT_STREAM = "application/vnd.amazon.eventstream"

_STRING = 7  # the event stream's header value type for a UTF-8 string

_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/]+)"
    r"/(?P<service>[^/]+)/aws4_request,\s*SignedHeaders=[^,\s]+,\s*Signature=[0-9a-f]{64}"
)

#: The name Bedrock gives an error of each status, outside a stream and inside one.
_ERROR_NAMES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
    529: "ServiceUnavailableException",
}


def _error_name(status: int) -> str:
    default = "InternalServerException" if status >= 500 else "ValidationException"
    return _ERROR_NAMES.get(status, default)


def bedrock_error(
    status: int, text: str, name: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """An error answer's body and headers, in Bedrock's shape."""
    return {"message": text}, {"x-amzn-ErrorType": name or _error_name(status)}


def bedrock_credential(
    headers: Mapping[str, str], api_key: str, *, echo: bool
) -> tuple[str, str] | None:
    """Why Bedrock refuses the request's credential (error name, message); ``None``: good.

    ``echo`` quotes a wrong key whole instead of masked, as a careless server would.
    """
    authorization = headers.get("authorization", "").strip()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer":  # a Bedrock API key
        presented = token.strip()
    else:
        signed = _SIGV4.fullmatch(authorization)
        if signed is None or not headers.get("x-amz-date"):
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        if signed["service"] != "bedrock":
            return (
                "InvalidSignatureException",
                f"Credential should be scoped to correct service: 'bedrock', "
                f"not {signed['service']!r}.",
            )
        presented = signed["key"]
    if presented == api_key:
        return None
    shown = presented if echo else f"{presented[:3]}***{presented[-4:]}"
    return (
        "UnrecognizedClientException",
        f"The security token included in the request is invalid: {shown}",
    )


def message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event stream message: prelude, its CRC, headers, payload, the message's CRC."""
    encoded = b""
    for name, value in headers.items():
        key, data = name.encode("utf-8"), value.encode("utf-8")
        encoded += struct.pack(">B", len(key)) + key + struct.pack(">BH", _STRING, len(data)) + data
    total = 4 + 4 + 4 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude))
    body = head + encoded + payload
    return body + struct.pack(">I", zlib.crc32(body))


def chunk_message(event: Mapping[str, Any]) -> bytes:
    """A ``chunk`` event carrying one Anthropic stream event."""
    data = json.dumps(event, ensure_ascii=False).encode("utf-8")
    payload = json.dumps({"bytes": base64.b64encode(data).decode("ascii")}).encode("utf-8")
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return message(headers, payload)


#: The exceptions a Bedrock stream can carry (the ``ResponseStream`` shape's members).
_STREAM_EXCEPTIONS = frozenset(
    {
        "internalServerException",
        "modelStreamErrorException",
        "validationException",
        "throttlingException",
        "modelTimeoutException",
        "serviceUnavailableException",
    }
)


def exception_message(status: int, text: str) -> bytes:
    """An error in the middle of the stream, as Bedrock sends one (``throttlingException``).

    A status with no exception of its own in a stream is ``modelStreamErrorException``,
    Bedrock's name for the model failing mid-stream.
    """
    name = _error_name(status)
    name = name[0].lower() + name[1:]
    headers = {
        ":exception-type": name if name in _STREAM_EXCEPTIONS else "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return message(headers, json.dumps({"message": text}).encode("utf-8"))
