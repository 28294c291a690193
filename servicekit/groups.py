"""Exceptions out of the exception groups trio hands back from nurseries (pure)."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["first_error"]

E = TypeVar("E", bound=BaseException)


def first_error(exc: BaseException, kinds: tuple[type[E], ...]) -> E | None:
    """``exc`` if it is one of ``kinds``, else the first such exception in the exception groups
    nested in it (trio hands errors of concurrent tasks back inside groups), else ``None``. A
    group is never the answer, though it is an ``Exception``: ``kinds`` of ``(Exception,)``
    finds the first exception a group holds."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := first_error(inner, kinds)) is not None:
                return found
        return None
    return exc if isinstance(exc, kinds) else None
