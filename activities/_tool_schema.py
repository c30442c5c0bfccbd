"""A tool as the model sees it: the schema of its parameters, and its result as text.

The schema comes from type hints, through a pydantic model that also
validates and coerces the model's arguments before the function sees them,
and from a Google-style docstring: its summary is the tool's description and
its `Args:` lines become parameter descriptions. pydantic's generated titles
are dropped, since they would be sent with every request.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pydantic_core

from agentor_temporal.activities._json_pieces import dumps

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
    """The pydantic model of `fn`'s parameters, which checks and coerces the model's arguments.

    Raises:
        TypeError: naming the tool and parameter, for a parameter the model
            could never be offered (a name pydantic keeps for itself, a type
            it cannot describe), when the tool is defined rather than at a
            run's first call.
    """
    try:
        return _args_model(fn)
    except _UNDESCRIBABLE as exc:
        raise _undescribable(getattr(fn, "__name__", "tool"), exc) from None


#: what pydantic raises for a parameter type it cannot check or put in a schema
_UNDESCRIBABLE = (
    pydantic.PydanticUserError,
    pydantic.PydanticSchemaGenerationError,
    NameError,
    # a constraint pydantic-core cannot build a validator of (Field(gt=math.nan),
    # Field(pattern="[")): a many-line SchemaError, and no tool named
    pydantic_core.SchemaError,
)


def _undescribable(tool: str, exc: BaseException) -> TypeError:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if isinstance(exc, pydantic_core.SchemaError):
        # its lines nest, outermost first: the field and what is wrong are further in
        first = " ".join(lines)[:300]
    return TypeError(
        f"tool {tool!r}: its parameters cannot be described to the model ({first}); use "
        "JSON-like types (str, int, float, bool, lists, dicts, pydantic models, dataclasses, "
        "enums)"
    )


def _args_model(fn: Callable[..., Any]) -> type[pydantic.BaseModel]:
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
        if pname.startswith("_") or pname in _RESERVED:
            raise TypeError(
                f"tool {getattr(fn, '__name__', 'tool')!r}: parameter {pname!r} cannot be "
                "offered to the model (names starting with '_', and pydantic's own names "
                "such as model_config, are not arguments); rename it"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints.get(pname, Any), default)
    name = f"{getattr(fn, '__name__', 'tool')}_args"
    model: type[pydantic.BaseModel] = pydantic.create_model(name, **fields)
    return model


#: names a pydantic model keeps for itself: a parameter of one of them is not an argument
_RESERVED = frozenset(
    n for n in dir(pydantic.BaseModel) if n.startswith("model_") and not n.startswith("__")
)


def parameters_schema(model: type[pydantic.BaseModel], docs: dict[str, str]) -> dict[str, Any]:
    """The JSON schema of a tool's parameters, with the docstring's descriptions added.

    Raises:
        TypeError: for a parameter type JSON schema cannot describe.
    """
    try:
        schema = _strip_titles(model.model_json_schema())
    except _UNDESCRIBABLE as exc:
        raise _undescribable(model.__name__.removesuffix("_args"), exc) from None
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    for param, field in model.model_fields.items():
        prop = schema["properties"].get(field.alias or param)
        if isinstance(prop, dict) and "default" in prop and not _json_value(field.default):
            # a datetime.now(), a uuid4(), a path: computed when the module is
            # imported, so it differed in every process, and with it the
            # agent's fingerprint: only the process that began a run could
            # resume it, and no worker of a fleet took it
            del prop["default"]
    for param, text in docs.items():
        prop = schema["properties"].get(param)
        if isinstance(prop, dict) and "description" not in prop:
            prop["description"] = text
    result: dict[str, Any] = schema
    return result


def _json_value(value: Any, depth: int = 0) -> bool:
    """Whether a default is made of JSON values (in enums, models, dataclasses too).

    Such a default is written the same in every process; a datetime, a UUID,
    a path, bytes or a set may not be.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if depth > 20:
        return False
    if isinstance(value, enum.Enum):
        return _json_value(value.value, depth + 1)
    if isinstance(value, pydantic.BaseModel):
        return _json_value(value.model_dump(), depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json_value(dataclasses.asdict(value), depth + 1)
    if isinstance(value, (list, tuple)):
        return all(_json_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_value(v, depth + 1) for k, v in value.items())
    return False


def stringify(value: Any) -> str:
    """A tool's return value as the text the model reads: Agentor 0.1.1's rules.

    A model (anything with `model_dump`) is its dump as `json.dumps` writes it;
    a dict, list, tuple, number or boolean is its JSON; anything else is its
    `str()`. The text is the `tool_result`'s `result` in the JSONL too, so the
    same tool answers the model here as it did under Agentor: a `date`, a
    dataclass, a set or a `Decimal` was written as a JSON string (`"2026-01-01"`,
    quotes and escapes the model never saw under Agentor), and a pydantic
    model as pydantic's own JSON (no spaces, `T` in its datetimes).

    Always text, never an exception: the tool did its work, and an error would
    lead the model to call it again. Integers past Python's int-to-text limit
    (4300 digits) are written out in full; a value, or a part of one, that
    cannot be written (its `str()` raises) is named by its type.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        # an exact copy: a str subclass's own methods may raise, here or later
        return str.__getitem__(value, slice(None))
    # BaseException below: whatever the value's own code raises as it is written
    # (SystemExit, KeyboardInterrupt, CancelledError from a __str__) is the
    # value's, not a signal: this is sync code, which no cancel or signal of the
    # worker's interrupts. Let out, the model read 'Error: SystemExit: 2' for a
    # tool that had run, and was invited to call it again
    dump = _model_dump(value)
    if dump is not None:
        try:
            return _json_text(dump())
        except BaseException:  # noqa: B036 - see above
            return _shown(value)  # Agentor's fallback: its str()
    if isinstance(value, int) and not isinstance(value, bool):
        return _digits(value)
    if isinstance(value, (dict, list, tuple, float, bool)):
        try:
            return _json_text(value)
        except BaseException:  # noqa: B036 - see above
            # JSON cannot hold it, or the value's own code raised as it was written (a
            # dict subclass whose items() raises): the tool ran, so it is told as text
            pass
    return _shown(value)


def _model_dump(value: Any) -> Callable[[], Any] | None:
    """The value's `model_dump` (Agentor asks any value for one), or None."""
    try:
        dump = getattr(value, "model_dump", None)
    except BaseException:  # noqa: B036 - the value's own __getattr__, as in stringify
        return None
    return dump if callable(dump) else None


def _shown(value: Any) -> str:
    """`str(value)`; a note naming its type when that raises (anything: see `stringify`)."""
    try:
        return str(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deeply to show>"
    except BaseException:  # noqa: B036 - the value's own code, or an int past the limit
        return f"<a {type(value).__name__} that cannot be shown as text>"


#: Digits written out at most: a tool result is cut to 256 kB anyway, and on
#: Python 3.11 writing a 10**6-digit integer takes seconds of the event loop.
_MAX_DIGITS = 300_000
#: Bits past which an integer may exceed the int-to-text limit (4300 digits).
_SAFE_BITS = 14_000


def _digits(number: int) -> str:
    """An integer as decimal text, past the interpreter's int-to-text limit too."""
    number = int.__index__(number)  # an IntEnum or other subclass: its value
    if number < 0:
        return "-" + _digits(-number)
    if number.bit_length() <= _SAFE_BITS:
        return int.__repr__(number)
    size = int(number.bit_length() * 0.30103) + 1  # decimal digits, within one
    if size > _MAX_DIGITS:
        return f"<an integer of about {size} digits, too long to write out>"
    try:
        return int.__repr__(number)
    except ValueError:  # past sys.get_int_max_str_digits(): halve it, exactly
        half = size // 2
        high, low = divmod(number, 10**half)
        return _digits(high) + _digits(low).zfill(half)


def _json_text(value: Any) -> str:
    """`json.dumps(value, default=str)`, integers past the int-to-text limit included,
    written a piece at a time (`_json_pieces`: a huge value held the lock for seconds)."""
    try:
        return dumps(value, _shown)
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
    # each long integer becomes a unique string, then that string's JSON its digits
    token = f"long-int-{uuid.uuid4().hex}-"
    long_ints: list[str] = []

    def swap(item: Any) -> Any:
        if isinstance(item, int) and not isinstance(item, bool):
            if item.bit_length() <= _SAFE_BITS:
                return item
            long_ints.append(_digits(item))
            return f"{token}{len(long_ints) - 1}"
        if isinstance(item, dict):
            return {_key(k): swap(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [swap(v) for v in item]
        return item

    def _key(key: Any) -> Any:
        is_int = isinstance(key, int) and not isinstance(key, bool)
        return _digits(key) if is_int and key.bit_length() > _SAFE_BITS else key

    text = dumps(swap(value), _shown)
    return re.sub(f'"{token}(\\d+)"', lambda match: long_ints[int(match.group(1))], text)
