"""ksbuild as a GradBench tool: answers the GradBench protocol (CONTRIBUTING.md "Protocol" of
gradbench/gradbench) on stdin/stdout, one JSON message per line.

    gradbench run --eval "gradbench repo eval lse" --tool "python benchmarks/gradbench/tool.py"

`define` builds this folder's manifest (cached by ksbuild) and reports the build time; `evaluate`
converts the input to arrays once, then calls the compiled export at least `min_runs` times and until
`min_seconds` have passed, with one "evaluate" timing per call.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import evals  # noqa: E402

MANIFEST = HERE / "manifest.toml"


class Tool:
    """The tool's state: the package, built on the first define."""

    def __init__(self):
        self.pkg = None

    def define(self, msg: dict) -> dict:
        """success if the module is one of ours, after building the package (its time as a timing)."""
        if msg["module"] not in evals.MODULES:
            return {"success": False, "error": f"ksbuild has no kernels for the module {msg['module']!r}"}
        start = time.perf_counter_ns()
        if self.pkg is None:
            import ksbuild

            self.pkg = ksbuild.build(MANIFEST, quiet=True)
        return {"success": True, "timings": [{"name": "build", "nanoseconds": time.perf_counter_ns() - start}]}

    def evaluate(self, msg: dict) -> dict:
        """The function's output on the input, with one "evaluate" timing per call."""
        inp = msg["input"]
        start = time.perf_counter_ns()
        call, to_json = evals.calls(self.pkg, msg["module"], msg["function"], inp)
        prepare = time.perf_counter_ns() - start
        result, times = evals.run_timed(call, int(inp.get("min_runs", 1)), float(inp.get("min_seconds", 0)))
        timings = [{"name": "prepare", "nanoseconds": prepare}]
        timings += [{"name": "evaluate", "nanoseconds": t} for t in times]
        return {"success": True, "output": to_json(result), "timings": timings}

    def respond(self, msg: dict) -> dict:
        """The response to one message: define and evaluate answered, every other kind acknowledged."""
        handler = {"define": self.define, "evaluate": self.evaluate}.get(msg.get("kind"))
        if msg.get("kind") == "start":
            return {"id": msg["id"], "tool": "ksbuild"}
        if handler is None:
            return {"id": msg["id"]}
        try:
            return {"id": msg["id"], **handler(msg)}
        except ValueError as e:
            return {"id": msg["id"], "success": False, "error": str(e)}
        except Exception:  # noqa: BLE001 - a failure is a response the eval reports, not a crash
            return {"id": msg["id"], "success": False, "error": traceback.format_exc()}


def main() -> int:
    """Answer messages until stdin closes."""
    tool = Tool()
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(tool.respond(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
