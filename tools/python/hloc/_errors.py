"""The exceptions and warnings of :mod:`hloc` (raised by its native module too)."""

from __future__ import annotations


class HloError(Exception):
    """An error about an HLO module or what was asked of it.

    ``str(error)`` is the diagnostic text the ``hloc`` command line prints for the same
    module (rustc style: ``path:line:col: error: message``, the source line, a caret and
    hints, then ``error: N errors in `path```), without its final newline.

    Attributes:
        message: that text.
        line: 1-based line of the first error in the module's text, or ``None`` when the
            error has no location (e.g. an unknown pass or engine).
        column: 1-based column (in characters) of the first error, or ``None``.
    """

    message: str
    line: int | None
    column: int | None

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class InputError(HloError, ValueError):
    """Arguments that cannot be used: inputs that do not match the entry parameters
    (count, shape, dtype; the message is ``hloc run --inputs``'s), an unknown pass, engine
    or chip. Also a :class:`ValueError`."""


class HloWarning(UserWarning):
    """Warnings and notes about a module (issued with :func:`warnings.warn`), e.g. a
    sharded module run on one device, or a pipeline note."""
