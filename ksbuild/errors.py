"""The one error type users see: a message that points at their file, line, column or key."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a user's file: 1-based line, 0-based column, optional end column; or a node
    of a model file (`node` names it, e.g. "Conv_3 (Conv)")."""

    file: str
    line: int = 0
    col: int = 0
    end_col: int | None = None
    source_line: str | None = None
    node: str | None = None
    called_from: tuple["Location", ...] = ()  # the callers of this place, innermost first (a traceback)

    def __str__(self) -> str:
        head = f"{self.file}:{self.line}:{self.col + 1}" if self.line else self.file
        return f"{head}: node {self.node}" if self.node else head

    def caret(self) -> str:
        """The source line with a caret run under the construct, or '' if unknown."""
        if self.source_line is None:
            return ""
        text = self.source_line.rstrip("\n")
        width = max(1, (self.end_col or self.col + 1) - self.col)
        width = min(width, max(1, len(text) - self.col))
        return f"    {text}\n    {' ' * self.col}^{'~' * (width - 1)}"


class KsbuildError(Exception):
    """An error in the user's input, reported with its location and a hint."""

    def __init__(self, message: str, loc: Location | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.hint = hint

    def __str__(self) -> str:
        head = f"{self.loc}: error: {self.message}" if self.loc else f"error: {self.message}"
        parts = [head]
        if self.loc is not None and self.loc.caret():
            parts.append(self.loc.caret())
        for caller in self.loc.called_from if self.loc is not None else ():
            code = f": {caller.source_line.strip()}" if caller.source_line else ""
            parts.append(f"  called from {caller}{code}")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)

    def at(self, loc: Location | None) -> "KsbuildError":
        """This error with a location filled in if it had none."""
        if self.loc is not None or loc is None:
            return self
        return KsbuildError(self.message, loc, self.hint)


class KsbuildWarning(UserWarning):
    """Something in the user's input that compiles but may not do what they expect: printed like an error,
    with its location and a hint, and the build goes on."""

    def __init__(self, message: str, loc: Location | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.loc, self.hint = message, loc, hint

    def __str__(self) -> str:
        text = str(KsbuildError(self.message, self.loc, self.hint))
        return text.replace(": error: ", ": warning: ", 1) if self.loc else "warning" + text[len("error"):]


def warn(message: str, loc: Location | None = None, hint: str | None = None) -> None:
    """Report a KsbuildWarning (the CLI prints it on stderr; Python callers see it as a warning)."""
    import warnings
    warnings.warn(KsbuildWarning(message, loc, hint), stacklevel=2)


def rule(prim, name: str):
    """prim's rule `name` (jvp, batch, emit), or an error saying why it has none (its `opt_outs` entry): the passes
    call a prim's rules through this (here, not in prims/, which codegen/ may not import at load time)."""
    r = getattr(prim, name)
    if r is None:
        why = next((o.split(":", 1)[1].strip() for o in prim.opt_outs if o.startswith(name + ":")), "")
        raise KsbuildError(f"'{prim.name}' has no {name} rule" + (f": {why}" if why else ""))
    return r


@contextmanager
def in_rule(eqn, rule: str):
    """Note on an exception other than a KsbuildError raised inside the block (a bug in a rule: a KeyError, an
    AttributeError) which rule of which primitive raised it; the exception is re-raised as it is."""
    try:
        yield
    except KsbuildError:
        raise
    except Exception as e:
        e.add_note(f"in the {rule} rule of the primitive '{eqn.prim.name}'")
        raise


@contextmanager
def located(loc: Location | None):
    """Give a KsbuildError raised inside the block the location `loc` if it has none yet."""
    try:
        yield
    except KsbuildError as e:
        raise e.at(loc) from None
