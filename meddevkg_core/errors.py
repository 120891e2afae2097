"""The base of the errors that mean "this input is unusable", as opposed to a fault in the code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

E = TypeVar("E", bound=Exception)


class InputError(ValueError):
    """A named input (file, directory, table) cannot be used; the message names it and says why.

    The `meddevkg` command prints such an error as one line and exits with 1; any other exception
    keeps its traceback."""


class CorpusError(InputError):
    """The corpus as a whole is unusable (a missing required table, an unreadable file)."""


class ModelNotFoundError(FileNotFoundError):
    """A model a setting names is not on this machine (nothing is downloaded at run time); the message names
    it. The `meddevkg` command names the option and variable of that setting in one line."""


MAX_REASON_CHARS = 300


def one_line(exc: BaseException) -> str:
    """An error's message as one line for an InputError: polars follows its first paragraph with
    advice ("You might want to try: ...") that names its own options, and may quote text of many lines."""
    return " ".join(str(exc).split("\n\n")[0].split())[:MAX_REASON_CHARS]


@contextmanager
def prefixed(prefix: str, error: type[E]) -> Iterator[None]:
    """An `error` raised in the block, raised again as one with `prefix: ` before its message: the file or
    run it is about, which the code that raised it did not know."""
    try:
        yield
    except error as exc:
        raise error(f"{prefix}: {exc}") from exc
