"""``first_error``: the first exception of some kinds out of nested exception groups (pure)."""

from __future__ import annotations

import pytest

from echomq_trio.errors import raising_first
from servicekit.groups import first_error


def test_the_first_of_the_kinds_depth_first() -> None:
    wanted = KeyError("k")
    group = ExceptionGroup("outer", [ValueError("v"), ExceptionGroup("inner", [wanted])])
    assert first_error(group, (KeyError,)) is wanted
    assert first_error(group, (TypeError,)) is None
    assert first_error(wanted, (KeyError,)) is wanted  # an exception of the kinds: itself


def test_a_group_is_never_the_answer_though_it_is_an_exception() -> None:
    first = ValueError("first")
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [first]), KeyError("k")])
    assert first_error(group, (Exception,)) is first
    assert first_error(ExceptionGroup("empty of the kinds", [ValueError()]), (KeyError,)) is None


def test_raising_first_of_any_exception_raises_the_exception_not_the_group() -> None:
    first = ValueError("first")
    with pytest.raises(ValueError) as raised, raising_first(Exception):
        raise ExceptionGroup("outer", [first, KeyError("k")])
    assert raised.value is first
    assert isinstance(raised.value.__cause__, ExceptionGroup)  # the others, as its cause
