"""The tools this run may call, through the sandbox's own channel.

    from sandboxd import tools
    tools.list()                         # [{"name": "orders.search", "description": ..., "risk": "read"}, ...]
    help(tools.orders.search)            # what it takes, from its JSON Schema
    tools.orders.search(query="lamp")    # its result, or one of the errors below
    tools.call("orders.search", {"query": "lamp"})

Calls never use the network: a run without any can call tools. Each call
passes sandboxd's gates (registry, permission, validation, confirmation,
idempotency, audit) and is recorded in the run's bundle. See
docs/tools.md.
"""

import inspect
import json
import keyword
import os
import re
import socket
import threading

__all__ = ["list", "describe", "call", "ToolError", "Refused", "InvalidArguments",
           "NeedsConfirmation", "Declined", "ToolFailed", "TimedOut", "LimitReached"]

_list = list


class ToolError(Exception):
    """A call that did not return a result. kind names why."""

    kind = "error"

    def __init__(self, message, tool=None, field=None):
        super().__init__(message)
        self.message, self.tool, self.field = message, tool, field


class Refused(ToolError):
    """The tool is not registered, or not granted to this run."""
    kind = "refused"


class InvalidArguments(ToolError):
    """The arguments do not fit the tool's schema; field names the argument."""
    kind = "invalid_arguments"


class NeedsConfirmation(ToolError):
    """A high-risk tool, and the run's caller cannot be asked to confirm it."""
    kind = "needs_confirmation"


class Declined(ToolError):
    """The run's caller declined the call, or did not answer in time."""
    kind = "declined"


class ToolFailed(ToolError):
    """The tool ran and failed; message is its own."""
    kind = "failed"


class TimedOut(ToolError):
    """The tool did not answer in the time a call has."""
    kind = "timed_out"


class LimitReached(ToolError):
    """A limit of the run's calls: their number, size, or calls at once."""
    kind = "limit"


_ERRORS = {c.kind: c for c in (Refused, InvalidArguments, NeedsConfirmation, Declined, ToolFailed, TimedOut, LimitReached)}


class _Channel:
    def __init__(self):
        fd = os.environ.get("SANDBOXD_TOOLS_FD")
        if not fd:
            raise RuntimeError("this run has no tool channel: the request names the tools it may call (options.tools)")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=int(fd))
        self._answers = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._next = 0

    def ask(self, request):
        with self._lock:
            self._next += 1
            request["id"] = self._next
            self._sock.sendall(json.dumps(request, separators=(",", ":")).encode() + b"\n")
            while True:
                line = self._answers.readline()
                if not line:
                    raise ToolError("the tool channel closed", request.get("tool"))
                answer = json.loads(line)
                # An answer to a request an interrupt left behind (in a
                # session's kernel) is skipped; one without an id is to a
                # request the daemon could not read, this one.
                if answer.get("id") in (None, request["id"]):
                    break
        err = answer.get("error")
        if err:
            cls = _ERRORS.get(err.get("kind"), ToolError)
            raise cls(err.get("message", ""), request.get("tool"), err.get("field"))
        return answer


_channel = None
_channel_lock = threading.Lock()


def _ask(request):
    global _channel
    with _channel_lock:
        if _channel is None:
            _channel = _Channel()
    return _channel.ask(request)


def list():
    """The tools this run may call: name, one-line description and risk."""
    return _ask({"op": "list"}).get("tools", [])


def describe(name):
    """A tool's name, description, risk and JSON Schema of its arguments."""
    return _ask({"op": "describe", "tool": name})["tool"]


def call(name, arguments=None, **kwargs):
    """Calls the tool name with arguments (a dict, or keywords) and returns its result."""
    args = dict(arguments or {})
    args.update(kwargs)
    return _ask({"op": "call", "tool": name, "arguments": args}).get("result")


def _identifier(name):
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit() or keyword.iskeyword(name):
        name = "_" + name
    return name


def _function(tool):
    """A function for tool whose signature and docstring come from its schema."""
    name = tool["name"]
    schema = tool.get("input_schema") or {}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params, lines = [], []
    for arg, prop in props.items():
        kind = prop.get("type", "any")
        desc = prop.get("description", "")
        lines.append(f"    {arg} ({kind}{', required' if arg in required else ''}){': ' + desc if desc else ''}")
        if arg.isidentifier() and not keyword.iskeyword(arg):
            default = inspect.Parameter.empty if arg in required else None
            params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default))

    def f(arguments=None, **kwargs):
        return call(name, arguments, **kwargs)

    f.__name__ = f.__qualname__ = _identifier(name.split(".", 1)[-1])
    # Required arguments first, as a person would write the signature.
    f.__signature__ = inspect.Signature(sorted(params, key=lambda p: p.default is not inspect.Parameter.empty))
    doc = tool.get("description", "") + f"\n\nRisk: {tool.get('risk')}."
    if lines:
        doc += "\n\nArguments:\n" + "\n".join(lines)
    f.__doc__ = doc
    return f


class _Provider:
    """The tools of one provider, as functions, each described on first use."""

    def __init__(self, name):
        self._name = name
        self._tools = {}

    def __getattr__(self, attr):
        full = self.__dict__.get("_tools", {}).get(attr)
        if full is None:
            raise AttributeError(f"{self._name} has no tool {attr!r} granted to this run (it has {sorted(self._tools)})")
        f = _function(describe(full))
        setattr(self, attr, f)
        return f

    def __dir__(self):
        return sorted(self._tools)

    def __repr__(self):
        return f"<tools of {self._name}: {', '.join(sorted(self._tools))}>"


_namespaces = None


def _load():
    global _namespaces
    if _namespaces is None:
        spaces = {}
        for t in list():
            provider, _, short = t["name"].partition(".")
            space = spaces.setdefault(_identifier(provider), _Provider(provider))
            space._tools[_identifier(short)] = t["name"]
        _namespaces = spaces
    return _namespaces


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    spaces = _load()
    if attr in spaces:
        return spaces[attr]
    raise AttributeError(f"no tool provider {attr!r} is granted to this run (it may call {sorted(spaces)})")


def __dir__():
    return sorted(set(globals()) | set(_load()))
