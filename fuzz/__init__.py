"""A differential fuzzer for ksbuild: random scalar and tensor kernels, exported through nestings of every
transformation, checked interpreter vs torch and compiled vs interpreter (README, "The fuzzer")."""
