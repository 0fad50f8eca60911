"""Each field of a request and its rule, in one place: the library, the command line, custom_generate and the
app refuse the same inputs with the same one-line message, which names the field and the rule.

The library's own limits (a server may set lower ones, app/limits.py):
  budget (and max_budget, shadow_budget) <= MAX_BUDGET nodes per tree: a tree's verification pass holds
      budget x (context + budget) attention scores, and far beyond the paper's 60-100 nodes a step only costs more;
  temperature <= MAX_TEMPERATURE: above it a model's distribution is close to uniform, its samples noise;
  seed a whole number in 0..MAX_SEED (torch's generator seeds with 64 bits).
Numbers are finite (no NaN, no infinity), whole numbers are ints (True is not a number), text is valid Unicode.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

MAX_BUDGET = 1024
MAX_TEMPERATURE = 5.0
MAX_SEED = 2**64 - 1
SHOWN_CHARS = 40  # a refused value is quoted up to this length: a hostile megabyte stays out of the message


class InputError(ValueError):
    """A request field that breaks its rule; the message names the field and the rule, in one line."""


def shown(value: Any) -> str:
    """The refused value as the message quotes it: its repr, cut."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def typed_number(value: Any) -> Any:
    """A number as a person or a widget gives it (typed text, a slider's float) as a Python number, anything else
    as it is, for its field's rule to refuse."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def whole_number(field: str, value: Any, low: int, high: int | None = None, *, typed: bool = False,
                 where: str = "") -> int:
    """`value` as an int in low..high (no upper bound when None). typed: also "12" and 12.0, as a box or a
    slider gives them; `where` follows the rule in the message (" on this server")."""
    rule = f"a whole number between {low} and {high}" if high is not None else f"a whole number >= {low}"
    number = typed_number(value) if typed else value
    try:
        if isinstance(number, bool | float | str) or number is None:
            raise TypeError
        number = operator.index(number)
    except TypeError:
        raise InputError(f"{field} must be {rule}{where}, got {shown(value)}") from None
    if number < low or (high is not None and number > high):
        raise InputError(f"{field} must be {rule}{where}, got {shown(value)}")
    return number


def number(field: str, value: Any, low: float, high: float, *, typed: bool = False, above_low: bool = False,
           where: str = "") -> float:
    """`value` as a finite float in [low, high] ((low, high] when above_low). typed: also "0.5", as typed."""
    rule = f"a number above {low:g} and at most {high:g}" if above_low else f"a number between {low:g} and {high:g}"
    parsed = typed_number(value) if typed else value
    if isinstance(parsed, bool) or not isinstance(parsed, int | float):
        raise InputError(f"{field} must be {rule}{where}, got {shown(value)}")
    parsed = float(parsed)
    if not math.isfinite(parsed) or parsed < low or parsed > high or (above_low and parsed == low):
        raise InputError(f"{field} must be {rule}{where}, got {shown(value)}")
    return parsed


def seed(value: Any, *, typed: bool = False) -> int | None:
    """The sampling seed: None or blank for a fresh random one, else a whole number in 0..MAX_SEED."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return whole_number("seed", value, 0, MAX_SEED, typed=typed, where=" (None or blank: a random one)")


def text(field: str, value: Any) -> str:
    """`value` if it is text a tokenizer can encode: a str of valid Unicode (no lone surrogate such as '\\ud800',
    which JSON's \\ud800 escapes and Python's str hold, but no encoding can write)."""
    if not isinstance(value, str):
        raise InputError(f"{field} must be text, got {type(value).__name__} {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(f"{field} must be valid Unicode text: character {error.start} (counting from 0) is the "
                         f"lone surrogate {value[error.start]!r}") from None
    return value


EMPTY_PROMPT = "prompt is empty: give some text to continue"


def prompt(value: Any) -> str:
    """A text prompt: valid Unicode, not blank."""
    if not text("prompt", value).strip():
        raise InputError(EMPTY_PROMPT)
    return value


def token_ids(value: Sequence[Any]) -> tuple[int, ...]:
    """A prompt given as token ids: not empty, whole numbers >= 0 (the model checks its vocabulary)."""
    ids = tuple(value)
    if not ids:
        raise InputError(EMPTY_PROMPT)
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise InputError("prompt token ids must be whole numbers >= 0")
    return ids


def flag(field: str, value: Any) -> bool:
    """A switch: True or False, not a value that merely looks like one."""
    if not isinstance(value, bool):
        raise InputError(f"{field} must be true or false, got {shown(value)}")
    return value


def choice(field: str, value: Any, choices: Sequence[str]) -> str:
    """One of `choices`, by name."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"unknown {field} {shown(value)}; choose one of {', '.join(choices)}")
    return value


def stops(value: Any) -> tuple[str, ...]:
    """Stop strings: None, one text or a list of texts; empty ones are dropped."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(s, str) for s in value):
        raise InputError(f"stop must be a text or a list of texts, got {shown(value)}")
    return tuple(text("stop", s) for s in value if s)


AUTO = "auto"  # the budget the tuner picks every step (goose.budget)


def parse_budget(value: Any, maximum: int = MAX_BUDGET, where: str = "") -> int | str | None:
    """A node budget as a person types it (command line, app) or the library takes it: blank or None -> None (the
    method's default: Drafter.default_budget), 'auto' -> AUTO (the tuner picks it each step), else a whole number
    of tree nodes, root included, in 1..maximum."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    number = typed_number(value)
    if isinstance(value, str) and not isinstance(number, int | float):
        raise InputError(f"budget must be 'auto' or a whole number of tree nodes, got {shown(value)}")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise InputError(f"budget must be a whole number of tree nodes >= 1 (the root counts), got {shown(value)}")
    if number > maximum:
        raise InputError(f"budget {number} is too large: at most {maximum} nodes per tree{where}")
    return number
