"""relu3: 0 below zero, x³/3 on [0, 1), x − 2/3 above: smooth like gelu, cheap like relu."""


# DOC-KS
def relu3(x: float) -> float:
    if x < 0.0:
        return 0.0
    elif x < 1.0:
        return 1 / 3 * x**3
    else:
        return x - 2 / 3
# ENDDOC-KS
