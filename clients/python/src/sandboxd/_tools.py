"""The caller's own tools: Python functions that a sandboxed program
calls as ``tools.caller.NAME``, declared with a run and answered here
(see docs/tools.md). A function's signature and type hints give the
JSON Schema of its arguments, its docstring the description."""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from sandboxd.v1 import sandboxd_pb2 as pb

_RISKS = {"read": pb.TOOL_RISK_READ, "write": pb.TOOL_RISK_WRITE, "high": pb.TOOL_RISK_HIGH}

#: ``confirm(tool, arguments)`` answers whether a high-risk call may go on.
Confirm = Callable[[str, Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Tool:
    """A function the program may call, with what it is declared as.
    ``risk`` is "read", "write" or "high"; a high-risk call waits for the
    run's ``confirm`` callback, and without one is refused."""

    fn: Callable[..., Any]
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    risk: str = "write"

    def to_proto(self) -> pb.ToolSpec:
        return pb.ToolSpec(name=self.name, description=self.description, input_schema_json=json.dumps(self.input_schema), risk=_RISKS[self.risk])


def tool(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    risk: str = "write",
    input_schema: Optional[Mapping[str, Any]] = None,
) -> Any:
    """Declare a function as a tool, as a decorator (``@tool`` or
    ``@tool(risk="read")``) or a call: ``tool(fn, risk="high")``."""
    if risk not in _RISKS:
        raise ValueError(f"risk: {risk!r} is not 'read', 'write' or 'high'")

    def make(f: Callable[..., Any]) -> Tool:
        doc = inspect.getdoc(f) or ""
        return Tool(f, name or f.__name__, description if description is not None else doc, dict(input_schema or schema_of(f)), risk)

    return make(fn) if fn is not None else make


_JSON = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}


def _type_schema(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _JSON:
        return {"type": _JSON[hint]}
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        return _type_schema(rest[0]) if len(rest) == 1 else {}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset, Iterable):
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin in (dict, Mapping):
        return {"type": "object"}
    return {}


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of ``fn``'s keyword arguments, from its signature
    and type hints; a parameter without a default is required."""
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        props[p.name] = _type_schema(hints.get(p.name, Any))
        if p.default is p.empty:
            required.append(p.name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def split(tools: Iterable[Union[str, Tool, Callable[..., Any]]]) -> tuple[list[str], list[Tool]]:
    """The operator's tools a run names (strings) and the caller's own."""
    names: list[str] = []
    declared: list[Tool] = []
    for t in tools:
        if isinstance(t, str):
            names.append(t)
        elif isinstance(t, Tool):
            declared.append(t)
        elif callable(t):
            declared.append(tool(t))
        else:
            raise ValueError(f"tools: {t!r} is not a tool's name, a function or a Tool")
    return names, declared


def first_message(req: Union[pb.RunCodeRequest, pb.RunCommandRequest], declared: list[Tool], confirms: bool) -> pb.RunWithToolsRequest:
    specs = [t.to_proto() for t in declared]
    if isinstance(req, pb.RunCodeRequest):
        return pb.RunWithToolsRequest(code=req, tools=specs, confirms=confirms)
    return pb.RunWithToolsRequest(command=req, tools=specs, confirms=confirms)


def _lookup(declared: Mapping[str, Tool], call: pb.ToolCall) -> tuple[Tool, dict[str, Any]]:
    t = declared.get(call.tool)
    if t is None:
        raise LookupError(f"the caller has no tool {call.tool}")
    return t, json.loads(call.arguments_json or "{}")


def _result(call: pb.ToolCall, value: Any = None, error: Optional[BaseException] = None) -> pb.RunWithToolsRequest:
    """The answer to call: value as JSON, or error as text."""
    result = pb.ToolResult(call_id=call.call_id)
    if error is not None:
        result.error = f"{type(error).__name__}: {error}"
    else:
        result.result_json = json.dumps(value, default=str)
    return pb.RunWithToolsRequest(tool_result=result)


def answer(declared: Mapping[str, Tool], call: pb.ToolCall) -> pb.RunWithToolsRequest:
    """Run the tool a call names: its result, or its error as text."""
    try:
        t, args = _lookup(declared, call)
        value = t.fn(**args)
        if inspect.isawaitable(value):
            raise TypeError(f"{call.tool} is a coroutine function: use sandboxd.aio.Client")
        return _result(call, value)
    except Exception as e:  # noqa: BLE001 - the program gets every failure as ToolFailed
        return _result(call, error=e)


async def answer_async(declared: Mapping[str, Tool], call: pb.ToolCall) -> pb.RunWithToolsRequest:
    """:func:`answer` for asyncio: a coroutine function is awaited, a plain
    one runs in a thread."""
    import asyncio

    try:
        t, args = _lookup(declared, call)
        if inspect.iscoroutinefunction(t.fn):
            return _result(call, await t.fn(**args))
        return _result(call, await asyncio.to_thread(t.fn, **args))
    except Exception as e:  # noqa: BLE001
        return _result(call, error=e)


def confirmation(confirm: Optional[Confirm], req: pb.ConfirmRequest) -> pb.RunWithToolsRequest:
    try:
        yes = bool(confirm is not None and confirm(req.tool, json.loads(req.arguments_json or "{}")))
    except Exception:  # noqa: BLE001 - a confirm that fails is a no
        yes = False
    return pb.RunWithToolsRequest(confirmation=pb.Confirmation(call_id=req.call_id, confirmed=yes))
