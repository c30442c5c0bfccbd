"""A tool as the model sees it: the schema of its parameters, and its result as text.

The schema comes from type hints, through a pydantic model that also
validates and coerces the model's arguments before the function sees them,
and from a Google-style docstring: its summary is the tool's description and
its `Args:` lines become parameter descriptions. pydantic's generated titles
are dropped, since they would be sent with every request.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any

import pydantic

_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$",
    re.IGNORECASE,
)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary, {parameter: description})."""
    if not doc:
        return "", {}
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in inspect.cleandoc(doc).splitlines():
        header = _SECTION.match(line)
        if header:
            section, current, arg_indent = header.group(1).lower(), None, None
            continue
        if section in ("args", "arguments", "parameters"):
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            # deeper-indented lines continue the previous description, even
            # when they happen to contain "word: text"
            if match and (arg_indent is None or indent <= arg_indent):
                current, arg_indent = match.group(1), indent
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
        elif section is None:
            summary.append(line)
    return "\n".join(summary).strip(), params


def _strip_titles(node: Any) -> Any:
    """Drop pydantic's generated `title` keys: noise sent on every request."""
    if isinstance(node, dict):
        return {
            k: _strip_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def args_model(fn: Callable[..., Any]) -> type[pydantic.BaseModel]:
    """The pydantic model of `fn`'s parameters, which checks and coerces the model's arguments."""
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # an unresolvable forward ref must not make the tool unusable
        hints = dict(getattr(fn, "__annotations__", {}))
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname in ("self", "cls") or param.kind in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints.get(pname, Any), default)
    name = f"{getattr(fn, '__name__', 'tool')}_args"
    model: type[pydantic.BaseModel] = pydantic.create_model(name, **fields)
    return model


def parameters_schema(model: type[pydantic.BaseModel], docs: dict[str, str]) -> dict[str, Any]:
    """The JSON schema of a tool's parameters, with the docstring's descriptions added."""
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    for param, text in docs.items():
        prop = schema["properties"].get(param)
        if isinstance(prop, dict) and "description" not in prop:
            prop["description"] = text
    result: dict[str, Any] = schema
    return result


def stringify(value: Any) -> str:
    """A tool's return value as the text the model reads (Agentor's rules)."""
    if value is None:
        return ""
    if isinstance(value, str):
        # an exact copy: a str subclass's own methods may raise, here or later
        return str.__getitem__(value, slice(None))
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except RecursionError:
            return f"<a {type(value).__name__} nested too deeply to show>"
