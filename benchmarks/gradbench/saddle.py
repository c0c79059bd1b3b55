"""GradBench's saddle eval (evals/saddle/README.md of gradbench/gradbench; Pearlmutter and Siskind's saddle
point): min over p1 of max over p2 of f(p1, p2) = (p1_0² + p1_1²) - (p2_0² + p2_1²), both by GradBench's
gradient descent (cpp/gradbench/gd.hpp), from `start`; the result is argmin p1 and then argmax p2 at it.

Nested AD: the argmin's gradient differentiates the cost max_p2 f(p1, p2), itself found by gradient descent on
the inner gradient. The four variants choose the mode of each (outer, inner): forward (a jvp per axis) or reverse
(torch.func.grad). gd.hpp's `while (true)` is a loop of at most STEPS iterations that stop changing anything
once it has stopped (kernels have no while; GradBench's input stops after 170).
"""
import torch

STEPS = 400           # iterations of each gradient descent (the tool checks that each one stopped)
AXES = ((1.0, 0.0), (0.0, 1.0))


def objective(p1: "float[2]", p2: "float[2]") -> float:
    return (p1[0] * p1[0] + p1[1] * p1[1]) - (p2[0] * p2[0] + p2[1] * p2[1])


def inner_gradient(p1, p2, forward):
    """∇ in p2 of f(p1, p2), by one jvp per axis or by reverse mode."""
    if forward:
        return torch.stack([torch.func.jvp(objective, (p1, p2), (torch.zeros(2), torch.tensor(e)))[1]
                            for e in AXES])
    return torch.func.grad(objective, argnums=1)(p1, p2)


def cost(outer_level, x, p1, start, inner):
    """What a descent lowers: the outer one max_cost(x), the inner one -f(p1, x) (its argmax is an argmin)."""
    if outer_level:
        return max_cost(x, start, inner)
    return -objective(p1, x)


def gradient(outer_level, x, p1, start, outer, inner):
    """cost's gradient in x, the outer one in mode `outer` (the inner descents in mode `inner`), the inner one in
    mode `inner`."""
    if outer_level:
        return outer_gradient(x, start, outer, inner)
    return -inner_gradient(p1, x, inner)


def argmin(outer_level, p1, start, outer, inner):
    """gd.hpp's multivariate_argmin of cost from start: (the point, whether it had not stopped after STEPS)."""
    x = start
    fx, gx = cost(outer_level, x, p1, start, inner), gradient(outer_level, x, p1, start, outer, inner)
    eta, i, go = 1e-5, 0, True
    for _ in range(STEPS):
        if go:
            if torch.sqrt(torch.sum(gx * gx)) <= 1e-5:
                go = False
            elif i == 10:
                eta, i = eta * 2.0, 0
            else:
                x_new = x - eta * gx
                if torch.sqrt(torch.sum((x - x_new) ** 2)) <= 1e-5:
                    go = False
                else:
                    f_new = cost(outer_level, x_new, p1, start, inner)
                    if f_new < fx:
                        x, fx, i = x_new, f_new, i + 1
                        gx = gradient(outer_level, x, p1, start, outer, inner)
                    else:
                        eta, i = eta / 2.0, 0
    return x, go


def max_cost(p1, start, forward):
    """max over p2 of f(p1, p2), gd.hpp's multivariate_max."""
    x, _ = argmin(False, p1, start, forward, forward)
    return objective(p1, x)


def max_cost_f(p1: "float[2]", start: "float[2]") -> float:
    return max_cost(p1, start, True)


def max_cost_r(p1: "float[2]", start: "float[2]") -> float:
    return max_cost(p1, start, False)


def outer_gradient(p1, start, outer, inner):
    """∇ of max_cost in p1: the derivative of a gradient descent whose steps are derivatives."""
    if outer:
        if inner:
            return torch.stack([torch.func.jvp(max_cost_f, (p1, start), (torch.tensor(e), torch.zeros(2)))[1]
                                for e in AXES])
        return torch.stack([torch.func.jvp(max_cost_r, (p1, start), (torch.tensor(e), torch.zeros(2)))[1]
                            for e in AXES])
    if inner:
        return torch.func.grad(max_cost_f)(p1, start)
    return torch.func.grad(max_cost_r)(p1, start)


def saddle(start, outer, inner):
    """[argmin p1 of max_cost, argmax p2 of f(p1, .)] ([4]; the second descent in the outer mode, as GradBench asks)
    and whether a descent had not stopped after STEPS."""
    p1, unfinished = argmin(True, start, start, outer, inner)
    p2, unfinished_2 = argmin(False, p1, start, outer, outer)
    return torch.cat([p1, p2]), unfinished or unfinished_2


def saddle_ff(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, True, True)


def saddle_fr(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, True, False)


def saddle_rf(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, False, True)


def saddle_rr(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, False, False)
