"""A broken sweep value as one line: `config_error` turns pydantic's errors into `dotted.key: value what is wrong`
(unknown keys first, with the closest allowed key); `rule` and `explain` are how the models
(perfbench/run/config_models.py) raise their own messages, `show` how a value is quoted in them."""

from __future__ import annotations

import difflib
import json
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from perfbench.errors import ConfigError


def explain(message: str) -> WrapValidator:
    """Replace pydantic's error(s) for a field (e.g. each branch of a union) by one message."""

    def wrap(value, handler):
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid", message) from None

    return WrapValidator(wrap)


def rule(message: str, key: str | None = None) -> PydanticCustomError:
    """A broken rule; `key` (relative to the model) is appended to the error's dotted path."""
    return PydanticCustomError("rule", message, {"key": key} if key else None)


_MESSAGES = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be below {lt}",
    "literal_error": "must be one of {expected}",
    "too_short": "must have at least {min_length} items",
    "too_long": "must have at most {max_length} items",
}


def show(v: Any) -> str:
    s = repr(v) if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


def suggest(key: str, allowed) -> str:
    close = difflib.get_close_matches(str(key), list(allowed), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _model_at(model: type[BaseModel] | None, loc: list[str]) -> type[BaseModel] | None:
    for part in loc:
        field = model.model_fields.get(part) if model else None
        ann = field.annotation if field else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return model


def config_error(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None, suffix: str = ""
) -> ConfigError:
    """One line for the first problem: `dotted.key: value what is wrong`. Unknown keys come first (a typo
    often explains a missing key)."""
    err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    ctx = err.get("ctx") or {}
    loc = [str(p) for p in err["loc"] if not any(c in str(p) for c in "[(")]
    if ctx.get("key"):
        loc.append(ctx["key"])
    where = ".".join([prefix, *loc] if prefix else loc)
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        at = _model_at(model, loc[:-1])
        allowed = list(at.model_fields) if at else []
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        msg = f"{where}: unknown key{suggest(loc[-1], allowed)} (value {show(value)}{hint})"
    elif kind == "missing":
        msg = f"missing key `{where}`"
        at = _model_at(model, loc[:-1])
        field = at.model_fields.get(loc[-1]) if at else None
        if field is not None and get_origin(field.annotation) is Literal:
            msg += f" (one of: {', '.join(get_args(field.annotation))})"
    elif kind == "rule":
        msg = f"{where}: {err['msg']}" if where else err["msg"]
    elif kind in _MESSAGES:
        msg = f"{where}: {show(value)} {_MESSAGES[kind].format(**ctx)}"
    else:
        text = err["msg"].removeprefix("Value error, ")
        msg = f"{where}: {show(value)} {text}"
    return ConfigError(msg + suffix)
