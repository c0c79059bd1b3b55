"""ONNX functions: model-local functions and ops that the ONNX standard defines as a function
of other ops (Mish, Range, LayerNormalization, ...) are imported by expanding their body.

The body's nodes are copied with formal inputs and outputs renamed to the node's, internal
values given a unique prefix, and attributes referenced by `ref_attr_name` substituted.
"""
from __future__ import annotations

import itertools

from ...errors import KsbuildError, Location

_expansions = itertools.count()
TYPE_CODES = None


def inline_local_function(imp, frame, proto, loc: Location, opsets: dict[str, int]) -> None:
    """A call of a function defined in the model."""
    fn = imp.functions[(proto.domain, proto.op_type)]
    defaults = {a.name: a for a in fn.attribute_proto}
    _run_body(imp, frame, proto, fn, defaults, opsets)


def expand_schema_function(imp, frame, proto, loc: Location, opsets: dict[str, int], domain: str) -> None:
    """An op without a handler, expanded into the function body its ONNX schema defines."""
    import onnx.defs
    from onnx import FunctionProto
    if domain not in opsets:
        raise KsbuildError(f"op {proto.op_type} of domain '{domain}' is not supported (the model imports no such "
                           "domain)", loc)
    try:
        schema = onnx.defs.get_schema(proto.op_type, opsets[domain], domain)
    except Exception:  # noqa: BLE001  onnx raises SchemaError for unknown ops
        raise KsbuildError(f"unknown op {proto.op_type}" + (f" of domain '{domain}'" if domain else ""), loc) from None
    node = _with_defaults(proto, schema)
    body = None
    if schema.has_function:
        v = max((v for v in schema.function_opset_versions if v <= opsets[domain]), default=None)
        if v is not None:
            body = FunctionProto.FromString(schema.get_function_with_opset_version(v))
    if body is None and schema.has_context_dependent_function:
        body = _context_function(imp, frame, node, schema, opsets[domain], loc)
    if body is None:
        raise KsbuildError(f"op {proto.op_type} is not supported", loc)
    _run_body(imp, frame, node, body, {}, opsets)


def _with_defaults(proto, schema):
    """A copy of the node with the schema's default attribute values filled in."""
    from onnx import NodeProto
    node = NodeProto()
    node.CopyFrom(proto)
    given = {a.name for a in node.attribute}
    for name, a in schema.attributes.items():
        if name not in given and a.default_value is not None and a.default_value.name:
            node.attribute.append(a.default_value)
    return node


def _context_function(imp, frame, node, schema, opset: int, loc: Location):
    """The body of an op whose expansion depends on its input types (e.g. LayerNormalization)."""
    from onnx import FunctionProto, helper

    from .node import Node
    from .values import ONNX_DTYPES
    codes = {v: k for k, v in ONNX_DTYPES.items()}
    types = []
    probe = Node(imp, frame, node, loc, opset)
    for name in node.input:
        if not name:
            types.append(helper.make_tensor_type_proto(1, None))
            continue
        v = frame.lookup(name, probe)
        from onnx import TensorProto
        elem = getattr(TensorProto, codes[v.dtype])
        types.append(helper.make_tensor_type_proto(elem, [d if isinstance(d, int) else str(d) for d in v.shape]))
    versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    try:
        if versions:
            raw = schema.get_context_dependent_function_with_opset_version(
                max(versions), node.SerializeToString(), [t.SerializeToString() for t in types])
        else:
            raw = schema.get_context_dependent_function(node.SerializeToString(),
                                                        [t.SerializeToString() for t in types])
    except Exception as e:  # noqa: BLE001  the schema rejects the node (bad attribute or types)
        raise KsbuildError(f"{node.op_type}: cannot expand it into simpler ops: {e}", loc) from None
    return FunctionProto.FromString(raw) if raw else None


def _run_body(imp, frame, proto, fn, defaults: dict, opsets: dict[str, int]) -> None:
    """Run a function body's nodes in the caller's frame, renamed."""
    prefix = f"__fn{next(_expansions)}_"
    names = {}
    for i, formal in enumerate(fn.input):
        names[formal] = proto.input[i] if i < len(proto.input) else ""
    for i, formal in enumerate(fn.output):
        if i < len(proto.output) and proto.output[i]:
            names[formal] = proto.output[i]
    attrs = {a.name: a for a in proto.attribute}
    body_opsets = dict(opsets)
    body_opsets.update({(o.domain or ""): o.version for o in fn.opset_import})
    label = proto.name or proto.op_type
    from .node import NeedsConstant
    for k, inner in enumerate(fn.node):
        node = _renamed(inner, names, prefix, attrs, defaults)
        node.name = f"{label}/{inner.name or inner.op_type + '_' + str(k)}"
        try:
            imp.run_node(frame, node, k, body_opsets)
        except NeedsConstant as e:
            if e.value.startswith(prefix):  # an internal value: it comes from the node's inputs
                raise NeedsConstant(e.message, e.loc, e.value, [i for i in proto.input if i], e.hint) from None
            raise


def _renamed(inner, names: dict, prefix: str, attrs: dict, defaults: dict):
    """A copy of a body node: names renamed (in its subgraphs too), attribute references resolved."""
    from onnx import NodeProto
    node = NodeProto()
    node.CopyFrom(inner)
    rename = lambda n: names.get(n, prefix + n if n else "")  # noqa: E731
    _rename_node(node, rename)
    del node.attribute[:]
    for a in inner.attribute:
        if a.ref_attr_name:
            src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if src is None:
                continue
            new = node.attribute.add()
            new.CopyFrom(src)
            new.name = a.name
        else:
            new = node.attribute.add()
            new.CopyFrom(a)
            for g in ([new.g] if new.HasField("g") else []) + list(new.graphs):
                _rename_graph(g, rename)
    return node


def _rename_node(node, rename) -> None:
    node.input[:] = [rename(n) for n in node.input]
    node.output[:] = [rename(n) for n in node.output]


def _rename_graph(g, rename) -> None:
    """Rename every value of a subgraph consistently (its own names and the outer ones it reads)."""
    for vi in list(g.input) + list(g.output):
        vi.name = rename(vi.name)
    for t in g.initializer:
        t.name = rename(t.name)
    for nd in g.node:
        _rename_node(nd, rename)
        for a in nd.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename_graph(sub, rename)
