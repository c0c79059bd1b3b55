"""A long export's steps are functions of their own, each declaring the workspace pointers it uses.

An export's body is the code of its equations, one after the other: its steps. Declared once at the top of the
function, the pointers into the workspace (one per buffer of the memory plan) were values the compiler computed
once and kept for the whole call, and in one function of a hundred loop nests and kernel calls GCC spilled them,
and the nests' own values, into a frame of 4-6 KB (resnet18's loss gradient 5.5 KB, BERT's forward 4.2 KB on x86;
issue 36 asks for no frame above 512 B). So in a function of more than OUTLINE_ABOVE steps that write tensors
(fewer with a vector unit than without; the layers of a batch's image loop, transforms/per_row.py, count as steps
too) each such step is a lambda called where it stands, `[=]() KS_STEP { ... }();` (KS_STEP: noinline): a function
whose frame holds only its own nest's values and is free again when it returns. It takes the workspace's base anew
(`ks::step_base(workspace)`: an empty volatile asm, no instruction: the compiler cannot keep an address of one
step for another) and declares from it the pointers of the buffers it names; the export's arguments and dims it
reads are its parameters (`[=](auto x) KS_STEP { ... }(x);`), the locals it reads its captures, by value. (Captured,
an argument is a member of the closure, which the step reads through a pointer: a loop that stores bytes, which may
alias anything, read it again after every store and did not vectorize: the input's QuantizeLinear of an int8
network ran scalar, 9% of MobileNetV2's time at batch 8.) A step with a scalar result (a local that later steps
read) stays inline: the pointers it names are declared before it, in the function's scope, once. A shorter
function keeps its pointers at its top (Workspace.prologue): its frame is small anyway (the Cortex-M4 benchmark's
networks: at most 0.2 KB), and a call, or an address computed again, per step would cost a microcontroller flash.
emit_body (codegen/body.py) marks each step's lines with BEGIN and end(...) lines, which scope_steps removes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .cpp import STEP_MARK, Slot, Workspace

BEGIN, END = STEP_MARK, STEP_MARK + "-end "
BASE = "ks_ws"  # the step's workspace base (ks_ is the prefix of ksbuild's own names: ks_data_*)
# Block steps of a function beyond which each is a function of its own: with a vector unit (x86-64, aarch64), and
# without (a Cortex-M, whose spills are 4-byte floats and addresses, not 32-byte vectors in a realigned frame: a
# small ResNet's loss gradient of about 90 steps had a frame of 1.1 KB there, 2.2 KB on x86-64; the benchmark's
# transformer layer of 25 steps 0.2 KB).
OUTLINE_ABOVE = {True: 24, False: 48}
_NAME = re.compile(r"(?<!::)(?<!\.)(?<!->)\b[A-Za-z_]\w*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
# an OpenMP reduction clause's operator (`reduction(max:m)`: `max` is no name the code reads; a buffer named max or
# min would otherwise be declared in the step and unused, an error under -Werror)
_CLAUSE = re.compile(r"\breduction\(\s*\w+\s*:")


def end(block: bool) -> str:
    """The line that ends a step: `block`, whether its results are all tensors in buffers."""
    return END + ("block" if block else "local")


@dataclass
class _Step:
    block: bool = False
    body: list = field(default_factory=list)  # lines and the steps nested in it


def scope_steps(lines: list[str], ws: Workspace, vectors: bool = True, params: tuple[str, ...] = ()) -> list[str]:
    """An export's body (its lines at depth 1, steps marked), its steps functions of their own that declare the
    workspace slots they name when there are enough of them (`vectors`: the target has a vector unit), and take the
    export's parameters `params` (its arguments and dims, not the workspace) that they name as parameters."""
    top = _parse(lines)
    if _blocks(top) <= OUTLINE_ABOVE[vectors]:  # (the function declares every pointer at its top, once)
        ws.scoped = False
        return _lines(top)
    scope = _Scope(ws, params)
    out: list[str] = []
    for node in top.body:
        if isinstance(node, str):
            out.append(node)
            continue
        part, own = scope.flat(node)
        used = scope.named(own)
        if node.block and _code(part):
            out += scope.wrapped(part, used)
            continue
        fresh = [s for s in used if s.name not in scope.declared]
        scope.declared |= {s.name for s in fresh}
        out += [scope.declaration(s, "static_cast<unsigned char*>(workspace)") for s in fresh] + part
    return out


class _Scope:
    """The workspace's slots and those declared in the function's scope."""

    def __init__(self, ws: Workspace, params: tuple[str, ...] = ()):
        self.ws = ws
        self.slots = {s.name: s for s in ws.slots}
        self.params = tuple(params)
        self.declared: set[str] = set()

    def flat(self, step: _Step) -> tuple[list[str], list[str]]:
        """A step's lines, the steps nested in it as functions of their own (each declaring its slots); and those of
        its lines that are not in such a nested function."""
        out: list[str] = []
        own: list[str] = []
        for node in step.body:
            if isinstance(node, str):
                out.append(node)
                own.append(node)
                continue
            part, inner = self.flat(node)
            if node.block and _code(part):
                out += self.wrapped(part, self.named(inner))
            else:
                out += part
                own += inner
        return out, own

    def wrapped(self, part: list[str], used: list[Slot]) -> list[str]:
        """Lines as a lambda called where it stands (its source comments before it), declaring the slots `used`."""
        part = list(part)
        pad = part[0][:len(part[0]) - len(part[0].lstrip())] if part else "    "
        out = []
        while part and part[0].strip().startswith("//"):
            out.append(part.pop(0))
        names = _names(part)
        params = [p for p in self.params if p in names]
        out.append(pad + f"[=]({', '.join(f'auto {p}' for p in params)}) KS_STEP {{")
        if used:
            out.append(f"{pad}    unsigned char* const {BASE} = ks::step_base(workspace);")
            out += [pad + self.declaration(s, BASE) for s in used]
        out += ["    " + line if line else line for line in part]
        out.append(pad + f"}}({', '.join(params)});")
        return out

    def declaration(self, s: Slot, base: str) -> str:
        return f"    {s.ctype}* const {s.name} = reinterpret_cast<{s.ctype}*>({self.ws.address(s, base)});"

    def named(self, part: list[str]) -> list[Slot]:
        """The slots whose pointers the lines read, in the workspace's order (names in comments and strings, and
        members such as ks::max, do not count)."""
        names = _names(part)
        return [s for name, s in self.slots.items() if name in names]


def _names(part: list[str]) -> set[str]:
    """The names the lines' code reads (not those in comments and strings, nor members such as ks::max, nor the
    operators of reduction clauses)."""
    names: set[str] = set()
    for line in part:
        code = _CLAUSE.sub("reduction(", _STRING.sub('""', line).split("//", 1)[0])
        names.update(m.group(0) for m in _NAME.finditer(code))
    return names


def _parse(lines: list[str]) -> _Step:
    """The steps of marked lines, as a tree."""
    stack = [_Step(True)]
    for line in lines:
        text = line.strip()
        if text == BEGIN:
            stack.append(_Step())
        elif text.startswith(END):
            step = stack.pop()
            step.block = text == end(True)
            stack[-1].body.append(step)
        else:
            stack[-1].body.append(line)
    return stack[0]


def _blocks(step: _Step) -> int:
    """How many steps with code that may be blocks the tree holds."""
    nested = [n for n in step.body if isinstance(n, _Step)]
    return sum(_blocks(n) + (n.block and _code(_lines(n))) for n in nested)


def _lines(step: _Step) -> list[str]:
    """A step's lines as marked."""
    return [line for n in step.body for line in ([n] if isinstance(n, str) else _lines(n))]


def _code(part: list[str]) -> bool:
    """Whether lines hold code (not only comments)."""
    return any(line.strip() and not line.strip().startswith("//") for line in part)
