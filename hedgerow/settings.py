"""One settings object per process, read once at start.

Each process declares a frozen dataclass whose fields are made with `setting(...)`. Every field
becomes a command-line flag (`--max-batch-tokens`) and an environment variable
(`HEDGEROW_MAX_BATCH_TOKENS`); the flag wins over the variable, the variable over the default.
Help text states the unit and what a value costs. Nothing else in the code reads `os.environ`
for configuration.
"""

import argparse
import dataclasses
import os
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
    minimum: float | None = None,
    maximum: float | None = None,
    secret: bool = False,
    literal: bool = False,
) -> Any:
    """A dataclass field that is also a flag and an environment variable.

    `minimum`/`maximum` bound numbers (inclusive); `choices` bounds strings; `secret` keeps
    the value out of logs. An optional setting given as "" or "none" is None (unset), unless
    `literal`: then the string is the value as given ("" switches a template off, say).
    """
    meta = {
        "help": help,
        "unit": unit,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "secret": secret,
        "literal": literal,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple for sequence defaults")
    return dataclasses.field(default=default, metadata={"hedgerow": meta})


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _base_type(annotation: Any) -> tuple[type, bool]:
    """Return (type, optional) for `T`, `T | None` and `tuple[str, ...]` annotations."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported settings annotation {annotation!r}")
        return _base_type(args[0])[0], True
    if origin is tuple:
        return tuple, False
    return annotation, False


def _parse(kind: type, raw: str, name: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true or false, got {raw!r}")
    if kind is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if kind is Path:
        return Path(raw).expanduser()
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {raw!r}") from None
    if kind is float and value != value:  # NaN passes every bound check
        raise ConfigError(f"{name}: expected a number, got {raw!r}")
    return value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per settings field to `parser`; defaults stay unresolved until `load`."""
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata.get("hedgerow")
        if meta is None:
            continue
        kind, _ = _base_type(hints[field.name])
        parts = [meta["help"]]
        if meta["unit"]:
            parts.append(f"Unit: {meta['unit']}.")
        if meta["choices"]:
            parts.append("One of: " + ", ".join(meta["choices"]) + ".")
        shown = "(none)" if field.default is None else field.default
        if kind is tuple:
            shown = ",".join(field.default) or "(empty)"
        if not meta["secret"]:
            parts.append(f"Default: {shown}.")
        parts.append(f"Env: {env_name(field.name)}.")
        help_text = " ".join(parts).replace("%", "%%")
        if kind is bool:
            parser.add_argument(
                flag_name(field.name),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag_name(field.name),
                dest=field.name,
                default=None,
                metavar=field.name.upper(),
                help=help_text,
            )


def load(
    cls: type,
    namespace: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """Build `cls` from flags, then environment variables, then defaults; validate bounds."""
    environ = os.environ if environ is None else environ
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        meta = field.metadata.get("hedgerow")
        if meta is None:
            continue
        kind, optional = _base_type(hints[field.name])
        raw = getattr(namespace, field.name, None) if namespace is not None else None
        source = flag_name(field.name)
        if raw is None and env_name(field.name) in environ:
            raw = environ[env_name(field.name)]
            source = env_name(field.name)
        if raw is None:
            continue
        if isinstance(raw, str):
            if meta["literal"] and kind is str:
                values[field.name] = raw
                continue
            if optional and raw.strip().lower() in ("", "none"):
                values[field.name] = None
                continue
            value = _parse(kind, raw, source)
        else:
            value = raw
        _check_bounds(meta, value, source)
        values[field.name] = value
    return cls(**values)


def _check_bounds(meta: dict, value: Any, source: str) -> None:
    if meta["choices"] and value not in meta["choices"]:
        raise ConfigError(f"{source}: {value!r} is not one of {', '.join(meta['choices'])}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if meta["minimum"] is not None and value < meta["minimum"]:
            raise ConfigError(f"{source}: {value} is below the minimum {meta['minimum']}")
        if meta["maximum"] is not None and value > meta["maximum"]:
            raise ConfigError(f"{source}: {value} is above the maximum {meta['maximum']}")


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
