"""`counter`: a tool component in Python for the world `tool-plugin` of `agentmesh:plugin`.

Actions (each `input` is a JSON object; each answer is the JSON the LLM sees):

- `count` -> `{"count": N}`: N counts the calls of `count` in this session (one task).
- `remember {key, value}` -> `{"stored": key}`: keeps `value` (any JSON) in the host's
  key-value store, private to this component and this task.
- `recall {key}` -> `{"key": key, "value": value}`: `value` is null when nothing is stored.
- `fetch {url}` -> `{"status": code, "body": "..."}`: a GET over `wasi:http` (first 1000
  characters of the body). Only the origins in the manifest's `allowed_hosts` are reachable.
- `fail`: raises an uncaught exception, to show where a Python traceback goes.

Built with componentize-py (`bash guests/python/build.sh`), which reads this module (`app`)
and `tool.py` beside it; see the comments there and below for what it expects.
"""

import json
from urllib.parse import urlsplit

# The bindings: componentize-py generates the package `wit_world` while it builds (run
# `componentize-py -d wit -w tool-plugin bindings DIR` to read them). Imported interfaces are
# modules of `wit_world.imports`, exported ones of `wit_world.exports`. An interface name that
# two packages share is qualified: this world sees both `agentmesh:plugin/types` and
# `wasi:http/types`, so they are `agentmesh_plugin_types` and `wasi_http_types`.
from componentize_py_types import Err
from wit_world.exports import tool
from wit_world.imports import host, outgoing_handler, streams, wasi_http_types as http
from wit_world.imports.agentmesh_plugin_types import ToolError_Fatal, ToolError_Recoverable

# componentize-py runs this module at build time and snapshots the interpreter: only the
# modules imported by then are in the component. A standard-library module that a library
# imports lazily, inside a function, is missing at run time (`ModuleNotFoundError: No module
# named 'heapq'` from `collections.Counter.most_common(n)`, for instance). Import such modules
# here, at the top, even if this file does not use them by name.

# How much of a fetched body the answer carries, in characters.
BODY_CHARS = 1000


class Recoverable(Exception):
    """A failure the LLM can act on: the call fails with this message and the task goes on."""


class Session(tool.Session):
    """One tool session: the host creates it before a task's first call of the tool and drops
    it when the task ends, so what it holds lasts one task.

    componentize-py takes the class implementing the exported resource `session` of the
    interface `tool` from a top-level module named after the interface, `tool` (see
    `tool.py`, which re-exports this class).
    """

    def __init__(self, settings: str, parameters: str) -> None:
        # `settings` (the operator's values) and `parameters` (the task's bound tool
        # parameters) are JSON text; this tool needs neither.
        self.counted = 0

    def invoke(self, action: str, input: str) -> str:
        """Runs `action`. A WIT `result` comes back as the return value (its `ok` JSON) or
        as a raised `componentize_py_types.Err` carrying the `tool-error`."""
        handler = ACTIONS.get(action)
        if handler is None:
            # Fatal: the host ends the task with this message.
            raise Err(ToolError_Fatal(f"counter has no action `{action}`"))
        try:
            answer = handler(self, parse_object(input))
        except Recoverable as e:
            raise Err(ToolError_Recoverable(str(e)))
        # Any other exception is not caught: it traps the instance, and the host reports the
        # call as a fault whose message ends with the traceback printed on stderr.
        return json.dumps(answer)

    def count(self, input: dict) -> dict:
        self.counted += 1
        return {"count": self.counted}

    def remember(self, input: dict) -> dict:
        key = text(input, "key")
        if "value" not in input:
            raise Recoverable("`value` is required")
        host.kv_set(key, json.dumps(input["value"]).encode())
        host.log(host.Level.DEBUG, f"remembered `{key}`")
        return {"stored": key}

    def recall(self, input: dict) -> dict:
        key = text(input, "key")
        stored = host.kv_get(key)  # bytes, or None for a missing key
        return {"key": key, "value": None if stored is None else json.loads(stored)}

    def fetch(self, input: dict) -> dict:
        url = text(input, "url")
        status, body = http_get(url, limit=BODY_CHARS * 4)  # a character is <= 4 bytes
        return {"status": status, "body": body.decode(errors="replace")[:BODY_CHARS]}

    def fail(self, input: dict) -> dict:
        return {"average": average([])}


# The actions, by name.
ACTIONS = {
    "count": Session.count,
    "remember": Session.remember,
    "recall": Session.recall,
    "fetch": Session.fetch,
    "fail": Session.fail,
}


def parse_object(input: str) -> dict:
    """The call's input, which must be a JSON object."""
    try:
        value = json.loads(input)
    except json.JSONDecodeError as e:
        raise Recoverable(f"the input is not JSON: {e}")
    if not isinstance(value, dict):
        raise Recoverable("the input must be a JSON object")
    return value


def text(input: dict, key: str) -> str:
    """A required string field of the input."""
    value = input.get(key)
    if not isinstance(value, str):
        raise Recoverable(f"`{key}` (a string) is required")
    return value


def average(values: list) -> float:
    return sum(values) / len(values)  # ZeroDivisionError for an empty list


def http_get(url: str, limit: int) -> tuple[int, bytes]:
    """GETs `url` over `wasi:http/outgoing-handler`, blocking: the status and up to `limit`
    bytes of the body. A request the host refuses (an origin not in `allowed_hosts`) or that
    fails on the way is a `Recoverable` error naming the URL.

    Child resources (a pollable, a body stream) must be released before their parents, so
    each is used in a `with` block, which drops it on exit.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Recoverable(f"`url` must be an http or https URL, not {url!r}")
    request = http.OutgoingRequest(http.Fields())
    request.set_method(http.Method_Get())
    request.set_scheme(http.Scheme_Https() if parts.scheme == "https" else http.Scheme_Http())
    request.set_authority(parts.netloc)
    path = parts.path or "/"
    request.set_path_with_query(f"{path}?{parts.query}" if parts.query else path)
    try:
        # `handle` takes the request; the host's answer (or its refusal) arrives in the future.
        with outgoing_handler.handle(request, None) as future:
            with future.subscribe() as ready:
                ready.block()
            answer = future.get()  # Some(Ok(Ok(response) | Err(error-code)))
    except Err as e:  # refused before any future was made
        raise Recoverable(refusal(url, e.value))
    if answer is None or isinstance(answer, Err):
        raise Recoverable(f"GET {url}: the response was not available")
    if isinstance(answer.value, Err):
        raise Recoverable(refusal(url, answer.value.value))
    with answer.value.value as response:
        status = response.status()
        with response.consume() as body, body.stream() as stream:
            data = b""
            while len(data) < limit:
                try:
                    data += stream.blocking_read(limit - len(data))
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break  # the end of the body
                    raise Recoverable(f"GET {url}: the body could not be read")
    return status, data


def refusal(url: str, code: http.ErrorCode) -> str:
    """The message for a `wasi:http` error code (`ErrorCode_HttpRequestDenied()`, ...)."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    if isinstance(code, http.ErrorCode_HttpRequestDenied):
        return f"GET {url} was refused: the host denied the request ({name})"
    return f"GET {url} failed: {name}"
