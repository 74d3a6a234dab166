"""The SDK's coercion of configuration values and the trainer's agree: a value both read means the same to both.

The trainer stays free of the SDK (it is what runs in the pods), so it keeps its own coercer
(``fsdp_trainer.options.coerce``); this table holds the two to one behaviour for every kind of field.
"""

from __future__ import annotations

from typing import Literal

import pytest

from fsdp_sdk.config import Origin, _convert
from fsdp_sdk.errors import ConfigError

trainer_options = pytest.importorskip("fsdp_trainer.options")
TrainerConfigError = pytest.importorskip("fsdp_trainer.errors").ConfigError

CASES = [
    (int, "4"), (int, " 4 "), (int, "1_000"), (int, "-3"), (int, "two"), (int, "1.5"), (int, 2.0), (int, True),
    (int | None, "auto"), (int | None, "none"), (int | None, "null"), (int | None, ""), (int | None, "8"),
    (float, "0.5"), (float, "1e-3"), (float, "x"), (float, 3),
    (bool, "true"), (bool, "Yes"), (bool, "off"), (bool, "0"), (bool, "maybe"), (bool, 1),
    (str, "text"), (str, 7),
    (Literal["a", "b"], "a"), (Literal["a", "b"], " b "), (Literal["a", "b"], "c"),
    (str | None, "auto"),
]  # fmt: skip


def _core(tp: object, value: object) -> object:
    try:
        return _convert(value, tp, Origin("x", "test"))
    except ConfigError:
        return "refused"


def _trainer(tp: object, value: object) -> object:
    try:
        return trainer_options.coerce("--x", tp, value)
    except TrainerConfigError:
        return "refused"


@pytest.mark.parametrize(("tp", "value"), CASES, ids=[f"{t}-{v!r}" for t, v in CASES])
def test_the_sdk_and_the_trainer_read_a_value_the_same(tp: object, value: object) -> None:
    assert _core(tp, value) == _trainer(tp, value)
