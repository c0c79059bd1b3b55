"""Compile: run CMake on a rendered project, with progress and clean failure."""
