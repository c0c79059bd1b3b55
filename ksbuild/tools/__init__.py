"""Developer tools that are not part of the build pipeline: the ONNX conformance runner and its report."""
