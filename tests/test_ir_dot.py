"""`ksbuild ir --dot / --svg / --html` (ksbuild/ir/dot.py): the picture of an export's IR.

The Graphviz text is checked by a small reader of DOT (balanced braces, every edge between declared
nodes) and against the IR's own text form: each edge runs from the node that defines a value to a
node that reads it, each fusion equation is a cluster holding its body's equations, and the memory
note lists the slots `ksbuild ir` prints. Graphviz itself renders it when `dot` is installed.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from ksbuild.cli import main
from ksbuild.exports import build_exports
from ksbuild.ir.core import Func
from ksbuild.ir.dot import Drawn, to_dot
from ksbuild.ir.printer import print_func
from ksbuild.manifest import load_manifest
from ksbuild.prims.base import form_name

RELU3 = ROOT / "examples/relu3/manifest.toml"
MLP = ROOT / "examples/onnx_mlp/manifest.toml"
GMM = ROOT / "examples/gmm/manifest.toml"
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
NODE = re.compile(r"^\s*(n\d+) \[label=(\"(?:[^\"\\]|\\.)*\")", re.M)
EDGE = re.compile(r"^\s*(n\d+) -> (n\d+)(?: \[.*?label=\"([^\"]*)\")?", re.M)


def exports(manifest, names=None) -> list[Drawn]:
    es = build_exports(load_manifest(manifest))
    return [Drawn(e.name, e.spec.text, e.func) for e in es if names is None or e.name in names]


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The nodes (id -> label) and edges of DOT text, after checking its structure: one digraph, balanced
    braces outside strings, every statement ended, every edge between declared nodes."""
    bare = STRING.sub('""', text)
    assert bare.startswith("digraph ") and bare.rstrip().endswith("}")
    depth = 0
    for ch in bare:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0, "a } closes nothing"
    assert depth == 0, "unbalanced braces"
    for line in bare.splitlines()[1:-1]:
        assert line.rstrip().endswith((";", "{", "}")), line
    nodes = {m[1]: m[2][1:-1] for m in NODE.finditer(text)}
    edges = [(m[1], m[2], (m[3] or "").replace("\\l", "")) for m in EDGE.finditer(text)]
    for a, b, _ in edges:
        assert a in nodes and b in nodes, (a, b)
    return nodes, edges


def unwrapped(label: str) -> str:
    """A node's label as one line of text again (labels wrap long lines, indenting the continuation)."""
    return re.sub(r"\\l {4}", " ", label).replace("\\l", "\n").strip()


def defined(label: str) -> set[str]:
    """The value names a node defines: the outputs of an equation, or a parameter."""
    head = label.split(" = ")[0] if " = " in label else label
    return set(re.findall(r"%\w+(?=:)", head))


def read(label: str) -> set[str]:
    """The value names an equation node reads (its arguments) or a return node returns."""
    if label.startswith("return "):
        return set(re.findall(r"%\w+", label))
    if " = " not in label:
        return set()
    call = re.split(r"\s#\s", label.split(" = ", 1)[1])[0]  # (without the placement comment)
    return set(re.findall(r"%\w+", call[call.rfind("]") + 1:] if "](" in call else call))


@pytest.mark.parametrize("manifest", [RELU3, MLP, GMM], ids=["relu3", "onnx_mlp", "gmm"])
def test_the_dot_text_parses_and_its_edges_are_the_def_use_chains(manifest):
    nodes, edges = parse_dot(to_dot(exports(manifest)))
    into: dict[str, set[str]] = {}  # node -> the names its incoming edges carry: what the source defines,
    for a, b, via in edges:          # or the edge's label (a fusion's output, defined inside its cluster)
        into.setdefault(b, set()).update({via} if via else defined(unwrapped(nodes[a])))
    checked = 0
    for nid, label in nodes.items():
        label = unwrapped(label)
        wanted = read(label) if "..." not in label else set()  # (a cut label may hide arguments)
        made = into.get(nid, set())
        assert wanted <= made, (label, wanted - made)
        checked += bool(wanted)
    assert checked > 5


def test_a_fusion_is_a_cluster_of_its_body():
    text = to_dot(exports(RELU3, ["vrelu3"]))
    parse_dot(text)
    f = build_exports(load_manifest(RELU3))[1].func
    (fusion,) = [e for e in f.eqns if e.prim.name == "fusion"]
    cluster = text[text.index("fusion: one loop nest over f32[n]"):]
    cluster = cluster[:cluster.index("\n    }")]
    boxes = re.findall(r"shape=box", cluster)
    assert len(boxes) == len(fusion.params["body"].eqns) == 7
    prims = re.findall(r'label="%\w+: \w+\[n\] = (\w+)', cluster)
    assert prims == [form_name(e.prim, e.params) for e in fusion.params["body"].eqns]


def placements(f: Func) -> dict[str, set[str]]:
    """slot k -> the values `ksbuild ir` prints as placed in it (`# %v in slot k`)."""
    out: dict[str, set[str]] = {}
    for name, k in re.findall(r"(%\w+) in slot (\d+)", print_func(f, elide_over=8)):
        out.setdefault(k, set()).add(name)
    return out


def test_the_memory_note_lists_the_slots_the_text_form_prints():
    drawn = exports(GMM, ["gmm_grad", "gmm_loop_grad"])
    nodes, _ = parse_dot(to_dot(drawn))
    notes = [label for label in nodes.values() if label.startswith("memory plan")]
    assert len(notes) == len(drawn)
    for d, note in zip(drawn, notes):
        lines = note.split("\\l")
        slots = {m[1]: set(m[2].split(", ")) for line in lines if (m := re.match(r"slot (\d+): .*bytes: (.*)", line))}
        assert len(slots) == len(d.func.plan.slots) > 3
        assert {k: v for k, v in slots.items() if v != {""}} == placements(d.func)


def test_a_slot_names_its_type_and_bytes():
    (d,) = exports(GMM, ["gmm"])
    nodes, _ = parse_dot(to_dot([d]))
    (note,) = [label for label in nodes.values() if label.startswith("memory plan")]
    assert "slot 0: f64[K, d, d], 8*K*d*d bytes: %Qs" in note.split("\\l")


def run_cli(*args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_prints_dot_and_writes_it(tmp_path, capsys):
    code, out, _ = run_cli("ir", RELU3, "--dot", "--export", "vrelu3", capsys=capsys)
    assert code == 0 and out.startswith("digraph ") and "vrelu3 = vmap(relu3)" in out
    assert "relu3_vjp" not in out
    parse_dot(out)
    code, _, _ = run_cli("ir", MLP, "--dot", "-o", tmp_path / "mlp.dot", capsys=capsys)
    text = (tmp_path / "mlp.dot").read_text()
    assert code == 0 and "workspace bytes (C++): ks::aligned_bytes<float>(batch * 32)" in text
    parse_dot(text)


def test_an_unknown_export_is_named(capsys):
    code, _, err = run_cli("ir", RELU3, "--dot", "--export", "nope", capsys=capsys)
    assert code == 1 and "no export named nope" in err and "vrelu3" in err


def test_svg_without_graphviz_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` here
    code, _, err = run_cli("ir", RELU3, "--svg", tmp_path / "x.svg", capsys=capsys)
    assert code == 1 and "Graphviz" in err and "not installed" in err and "--html" in err
    assert not (tmp_path / "x.svg").exists()


def fake_dot(folder) -> None:
    """A `dot` on PATH that reads DOT text and prints a tiny SVG (to test the wiring without Graphviz)."""
    exe = folder / "dot"
    exe.write_text(f"#!{sys.executable}\nimport sys\ntext = sys.stdin.read()\nassert sys.argv[1] == '-Tsvg'\n"
                   "print('<?xml version=\"1.0\"?>\\n<svg id=\"fake\">' + str(text.count(' -> ')) + '</svg>')\n")
    exe.chmod(0o755)


def test_svg_and_html_through_dot(tmp_path, capsys, monkeypatch):
    fake_dot(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, _ = run_cli("ir", RELU3, "--dot", "-o", tmp_path / "x.svg", "--export", "vrelu3", capsys=capsys)
    assert code == 0 and (tmp_path / "x.svg").read_text().startswith("<?xml")
    code, out, _ = run_cli("ir", RELU3, "--html", tmp_path / "x.html", "--export", "vrelu3", capsys=capsys)
    page = (tmp_path / "x.html").read_text()
    assert code == 0 and '<div class="picture"><svg id="fake">' in page and "<?xml" not in page


def test_html_without_graphviz_has_the_tables_and_the_text(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, _ = run_cli("ir", GMM, "-o", tmp_path / "gmm.html", "--export", "gmm", capsys=capsys)
    page = (tmp_path / "gmm.html").read_text()
    assert code == 0 and "dot is not installed" in out
    assert "<svg" not in page and "Graphviz" in page
    assert "<th>fusion</th>" in page and "slot 0: f64[K, d, d], 8*K*d*d bytes: %Qs" in page
    assert "<pre>func gmm(" in page


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
@pytest.mark.parametrize("manifest", [RELU3, MLP], ids=["relu3", "onnx_mlp"])
def test_graphviz_renders_it(manifest):
    done = subprocess.run(["dot", "-Tsvg"], input=to_dot(exports(manifest)), capture_output=True, text=True)
    assert done.returncode == 0 and "<svg" in done.stdout, done.stderr
