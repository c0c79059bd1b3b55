"""The external C function of prim_samples.py's extern_call sample: the Python body the reference interpreter runs."""
import math

import ksbuild


@ksbuild.extern(sources=["extern_sample.c"], c_name="ks_sample_extern")
def sample_extern(x: float, y: float) -> float:
    return x * y + math.sin(x)
