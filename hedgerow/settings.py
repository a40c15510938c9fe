"""One settings object per process, read once at start, and everything generated from it.

Each process declares a frozen dataclass whose fields are made with `setting(...)`: the one
place a knob's name, type, default, bounds and help live. Every field becomes a command-line
flag (`--max-batch-tokens`) and an environment variable (`HEDGEROW_MAX_BATCH_TOKENS`); the flag
wins over the variable, the variable over the default. `fields_of` is the parsed view of a
settings class that the flags, the loader, the docs' settings tables (`markdown_table`) and the
operator's CRD schema and pod environment are all generated from. Help text states the unit
and what a value costs. Nothing else in the code reads `os.environ` for configuration.
"""

import argparse
import dataclasses
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Mapping

from hedgerow.errors import ConfigError

ENV_PREFIX = "HEDGEROW_"


def setting(
    default: Any,
    help: str,
    *,
    unit: str | None = None,
    choices: tuple[str, ...] | None = None,
    pattern: str | None = None,
    pattern_help: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    max_items: int | None = None,
    secret: bool = False,
    literal: bool = False,
) -> Any:
    """A dataclass field that is also a flag and an environment variable.

    `minimum`/`maximum` bound numbers, and each item of a tuple of numbers (inclusive);
    `max_items` bounds a tuple's length; `choices` bounds strings, as does `pattern` (a regular
    expression the whole string must match, also the CRD's; `pattern_help` says it in words
    for the error message); `secret` keeps the value out of logs. An optional setting given as
    "" or "none" is None (unset), unless `literal`: then the string is the value as given (""
    switches a template off, say).
    """
    meta = {"help": help, "unit": unit, "choices": choices, "pattern": pattern,
            "pattern_help": pattern_help, "minimum": minimum, "maximum": maximum,
            "max_items": max_items, "secret": secret, "literal": literal}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple for sequence defaults")
    return dataclasses.field(default=default, metadata={"hedgerow": meta})


@dataclasses.dataclass(frozen=True)
class Field:
    """One setting as declared: `kind` is bool, int, float, str, Path or tuple (whose items
    are `item_kind`); `optional` when None is a value."""

    name: str
    kind: type
    item_kind: type | None
    optional: bool
    default: Any
    help: str
    unit: str | None
    choices: tuple[str, ...] | None
    pattern: str | None
    pattern_help: str | None
    minimum: float | None
    maximum: float | None
    max_items: int | None
    secret: bool
    literal: bool

    @property
    def flag(self) -> str:
        return flag_name(self.name)

    @property
    def env(self) -> str:
        return env_name(self.name)


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _kinds(annotation: Any) -> tuple[type, type | None, bool]:
    """(kind, item kind, optional) of `T`, `T | None` and `tuple[T, ...]` annotations."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported settings annotation {annotation!r}")
        kind, item_kind, _ = _kinds(args[0])
        return kind, item_kind, True
    if origin is tuple:
        return tuple, typing.get_args(annotation)[0], False
    return annotation, None, False


def fields_of(cls: type) -> list[Field]:
    """Every setting of a settings class, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for field in dataclasses.fields(cls):
        meta = field.metadata.get("hedgerow")
        if meta is None:
            continue
        kind, item_kind, optional = _kinds(hints[field.name])
        out.append(Field(name=field.name, kind=kind, item_kind=item_kind, optional=optional,
                         default=field.default, **meta))
    return out


def field_of(cls: type, name: str) -> Field:
    return next(field for field in fields_of(cls) if field.name == name)


def _parse_one(kind: type, raw: str, name: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true or false, got {raw!r}")
    if kind is Path:
        return Path(raw).expanduser()
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {raw!r}") from None
    if kind is float and value != value:  # NaN passes every bound check
        raise ConfigError(f"{name}: expected a number, got {raw!r}")
    return value


def _parse(field: Field, raw: str, source: str) -> Any:
    if field.kind is tuple:
        return tuple(_parse_one(field.item_kind, part.strip(), source)
                     for part in raw.split(",") if part.strip())
    return _parse_one(field.kind, raw, source)


def env_value(value: Any) -> str:
    """A value as its HEDGEROW_* variable spells it (what `load` parses back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)


def shown_default(field: Field) -> str:
    """The default as help and docs show it."""
    if field.kind is tuple:
        return env_value(field.default) or "(empty)"
    return "(none)" if field.default is None else env_value(field.default)


def help_text(field: Field, *, choices: bool = True) -> str:
    """The help with its unit (and, with `choices`, the values it takes)."""
    parts = [field.help]
    if field.unit:
        parts.append(f"Unit: {field.unit}.")
    if field.choices and choices:
        parts.append("One of: " + ", ".join(field.choices) + ".")
    return " ".join(parts)


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per settings field to `parser`; defaults stay unresolved until `load`."""
    for field in fields_of(cls):
        parts = [help_text(field)]
        if not field.secret:
            parts.append(f"Default: {shown_default(field)}.")
        parts.append(f"Env: {field.env}.")
        text = " ".join(parts).replace("%", "%%")
        if field.kind is bool:
            parser.add_argument(field.flag, dest=field.name,
                                action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(field.flag, dest=field.name, default=None,
                                metavar=field.name.upper(), help=text)


def load(
    cls: type,
    namespace: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """Build `cls` from flags, then environment variables, then defaults; validate bounds."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in fields_of(cls):
        raw = getattr(namespace, field.name, None) if namespace is not None else None
        source = field.flag
        if raw is None and field.env in environ:
            raw, source = environ[field.env], field.env
        if raw is not None:
            values[field.name] = _value(field, raw, source)
    return cls(**values)


def load_one(cls: type, name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting of `cls` from its environment variable, else its default, bounds checked.

    For a probe such as the images' health check, which needs one setting and must not fail
    on the others (a gateway's --servers, say, may come by flag, which the probe never sees).
    """
    environ = os.environ if environ is None else environ
    field = field_of(cls, name)
    if field.env not in environ:
        return field.default
    return _value(field, environ[field.env], field.env)


def _value(field: Field, raw: Any, source: str) -> Any:
    """A flag's or variable's raw value as the field's type; ConfigError naming `source`."""
    if isinstance(raw, str):
        if field.literal and field.kind is str:
            return raw
        if field.optional and raw.strip().lower() in ("", "none"):
            return None
        value = _parse(field, raw, source)
    else:
        value = raw
    check_bounds(field, value, source)
    return value


def check_bounds(field: Field, value: Any, source: str) -> None:
    """Raise ConfigError naming `source` when `value` is outside `field`'s bounds."""
    if field.choices and value not in field.choices:
        raise ConfigError(f"{source}: {value!r} is not one of {', '.join(field.choices)}")
    if field.pattern and isinstance(value, str) and not re.fullmatch(field.pattern, value):
        expected = field.pattern_help or f"a match of {field.pattern}"
        raise ConfigError(f"{source}: {value!r} is not {expected}")
    items = value if isinstance(value, tuple) else (value,)
    if isinstance(value, tuple) and field.max_items is not None and len(value) > field.max_items:
        raise ConfigError(f"{source}: {len(value)} entries, at most {field.max_items}")
    for item in items:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if field.minimum is not None and item < field.minimum:
                raise ConfigError(f"{source}: {item} is below the minimum {field.minimum}")
            if field.maximum is not None and item > field.maximum:
                raise ConfigError(f"{source}: {item} is above the maximum {field.maximum}")


def describe(settings: Any) -> dict[str, Any]:
    """Settings as a dict for a start-up log line, with secrets masked."""
    out = {}
    for field in dataclasses.fields(settings):
        meta = field.metadata.get("hedgerow", {})
        value = getattr(settings, field.name)
        if meta.get("secret") and value:
            value = "***"
        out[field.name] = str(value) if isinstance(value, Path) else value
    return out


def markdown_table(*classes: type) -> str:
    """The docs' settings table of `classes`: flag, variable, default, meaning."""
    rows = ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for cls in classes:
        for field in fields_of(cls):
            default = "" if field.secret else f"`{shown_default(field)}`"
            meaning = help_text(field).replace("|", "\\|")
            rows.append(f"| `{field.flag}` | `{field.env}` | {default} | {meaning} |")
    return "\n".join(rows) + "\n"
