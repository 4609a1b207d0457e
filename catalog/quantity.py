"""Kubernetes resource quantities: parse and format CPU and memory amounts.

Pure functions; `parse_cpu("500m") == 0.5`, `parse_bytes("512Gi") == 512 * 2**30`.
"""

from __future__ import annotations

import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept."""


def _split(value: str | int | float) -> tuple[float, str]:
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        if value < 0:
            raise QuantityError(f"{value!r} is negative")
        return float(value), ""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (e.g. 8, 500m, 512Gi)")
    return float(match.group(1)), match.group(2) or ""


def parse_cpu(value: str | int | float) -> float:
    """CPU cores from `8`, `7.5` or `500m`."""
    number, suffix = _split(value)
    if suffix == "m":
        return number / 1000
    if suffix:
        raise QuantityError(f"{value!r} is not a CPU quantity (e.g. 8, 500m)")
    return number


def parse_bytes(value: str | int | float) -> int:
    """Bytes from `512Gi`, `1Ti`, `64G` or a plain number of bytes."""
    number, suffix = _split(value)
    if suffix == "m":
        raise QuantityError(f"{value!r} is not a memory quantity (e.g. 512Gi)")
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    return int(number * scale)


def format_bytes(count: int) -> str:
    """The largest binary unit that keeps the figure readable: `1Ti`, `1.5Ti`, `640Gi`."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        scale = _BINARY[suffix]
        if count >= scale:
            figure = count / scale
            text = f"{figure:.2f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    return str(count)


def format_cpu(cores: float) -> str:
    """`8`, `7.5` or `500m`, as Kubernetes would print it."""
    if cores == int(cores):
        return str(int(cores))
    if cores < 1:
        return f"{round(cores * 1000)}m"
    return f"{cores:g}"
