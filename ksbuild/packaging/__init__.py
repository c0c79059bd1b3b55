"""Packaging: render the CMake project, build it, install the tree, load it from Python."""
