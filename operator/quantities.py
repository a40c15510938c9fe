"""Kubernetes resource quantities ("4", "500m", 0.5, "1e3", "20Gi"): as the manifests spell
them, and the number they stand for. Imports nothing of the operator, so the CRD module and the
builders can both use it."""

import re
from typing import Any


def quantity(value: Any) -> str:
    return str(value)


_SUFFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9,
             "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30,
             "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def quantity_number(value: Any) -> float:
    """The number a quantity the schema accepted stands for ("4", "500m", 0.5, "1e3",
    "20Gi")."""
    number, exponent, suffix = re.fullmatch(r"\+?([0-9.]+)(?:[eE]([-+]?[0-9.]+))?([a-zA-Z]*)",
                                            str(value)).groups()
    return float(number) * 10.0 ** float(exponent or 0) * _SUFFIXES.get(suffix, 1.0)
