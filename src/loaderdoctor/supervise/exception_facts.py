"""What an exception says about itself beyond its message (read in a worker, sent as facts)."""

from __future__ import annotations

from typing import Any


def exception_facts(error: BaseException) -> dict[str, Any]:
    """What an exception says about itself beyond its message: the root of a chain (MONAI raises
    ``RuntimeError`` from ``OSError: image file is truncated``), and the record a WebDataset
    ``DecodingError`` names by ``key`` and ``url`` (its message is empty)."""
    facts: dict[str, Any] = {}
    chain = [error]
    while len(chain) < 32:
        cause = chain[-1].__cause__
        if cause is None and not chain[-1].__suppress_context__:
            cause = chain[-1].__context__
        if cause is None or cause in chain:
            break
        chain.append(cause)
    if len(chain) > 1:
        # What the wrapper wrapped, then what that came from: PIL raises "OSError: image file is
        # truncated" from a struct.error, which alone would say little.
        first, *deeper = (_one_line(link) for link in chain[1:])
        facts["root"] = first + "".join(f" (from {link})" for link in deeper[:2])
    for link in chain:
        key, url = getattr(link, "key", None), getattr(link, "url", None)
        if isinstance(key, str) and isinstance(url, str):
            facts["record_key"], facts["record_url"] = key, url
            break
    return facts


def _one_line(error: BaseException) -> str:
    cls = type(error)
    name = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"
    text = str(error).strip().splitlines()
    return f"{name}: {text[0]}" if text else name
