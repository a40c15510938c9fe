"""Small builders for the OpenAPI v3 schema nodes the CRD is written in.

Owns the vocabulary of the CRD: typed nodes (`integer`, `string`, `obj`, ...) that are already
a Kubernetes *structural* schema, and `rule`, a cross-field constraint in CEL that the API
server enforces (`x-kubernetes-validations`). A rule is written once, as CEL; the tests run
every rule with a CEL evaluator. It knows nothing about EmbeddingServices.
"""

from typing import Any

Node = dict[str, Any]


def rule(cel: str, message: str) -> Node:
    """A CEL rule with `self` bound to the node it sits on; `message` says what to change."""
    return {"rule": cel, "message": message}


def _node(kind: str, description: str, **extra: Any) -> Node:
    node: Node = {"type": kind, "description": description}
    node.update({k: v for k, v in extra.items() if v is not None})
    return node


def integer(description: str, *, default: int | None = None, minimum: int | None = None,
            maximum: int | None = None) -> Node:
    return _node("integer", description, default=default, minimum=minimum, maximum=maximum)


def number(description: str, *, default: float | None = None,
           minimum: float | None = None, maximum: float | None = None) -> Node:
    return _node("number", description, default=default, minimum=minimum, maximum=maximum)


def string(description: str, *, default: str | None = None, enum: tuple[str, ...] | None = None,
           pattern: str | None = None, max_length: int | None = None,
           min_length: int | None = None) -> Node:
    return _node("string", description, default=default,
                 enum=list(enum) if enum else None, pattern=pattern,
                 maxLength=max_length, minLength=min_length)


def boolean(description: str, *, default: bool | None = None) -> Node:
    return _node("boolean", description, default=default)


def quantity(description: str, *, default: str | None = None) -> Node:
    """A non-negative Kubernetes resource quantity ("4", "500m", "32Gi")."""
    node: Node = {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0,  # numbers only; the pattern below refuses a negative string
        "pattern": r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                   r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        "x-kubernetes-int-or-string": True,
    }
    if default is not None:
        node["default"] = default
    return node


def _with_rules(node: Node, rules: tuple[Node, ...]) -> Node:
    if rules:
        node["x-kubernetes-validations"] = list(rules)
    return node


def string_map(description: str, *, max_properties: int = 64,
               max_value_length: int = 4096, value_pattern: str | None = None,
               rules: tuple[Node, ...] = ()) -> Node:
    values: Node = {"type": "string", "maxLength": max_value_length}
    if value_pattern is not None:
        values["pattern"] = value_pattern
    return _with_rules({"type": "object", "description": description,
                        "additionalProperties": values, "maxProperties": max_properties}, rules)


def array(items: Node, description: str, *, max_items: int, default: list | None = None,
          rules: tuple[Node, ...] = ()) -> Node:
    return _with_rules(_node("array", description, items=items, maxItems=max_items,
                             default=default), rules)


def obj(properties: dict[str, Node], description: str, *, required: tuple[str, ...] = (),
        default: dict | None = None, rules: tuple[Node, ...] = (),
        preserve_unknown: bool = False) -> Node:
    node = _node("object", description, properties=properties,
                 required=list(required) or None, default=default)
    if preserve_unknown:
        node["x-kubernetes-preserve-unknown-fields"] = True
    return _with_rules(node, rules)
