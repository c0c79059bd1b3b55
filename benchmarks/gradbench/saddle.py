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


def argmax_inner(p1, start, forward):
    """gd.hpp's multivariate_argmax of f(p1, .) from start: its argmin of -f; (the point, whether it stopped)."""
    x, fx, gx = start, -objective(p1, start), -inner_gradient(p1, start, forward)
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
                    f_new = -objective(p1, x_new)
                    if f_new < fx:
                        x, fx, gx, i = x_new, f_new, -inner_gradient(p1, x_new, forward), i + 1
                    else:
                        eta, i = eta / 2.0, 0
    return x, go


def max_cost(p1, start, forward):
    """max over p2 of f(p1, p2), gd.hpp's multivariate_max."""
    x, _ = argmax_inner(p1, start, forward)
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
    """[argmin p1, argmax p2 at it] ([4]) and whether any descent stopped at STEPS instead of converging."""
    x, fx, gx = start, max_cost(start, start, inner), outer_gradient(start, start, outer, inner)
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
                    f_new = max_cost(x_new, start, inner)
                    if f_new < fx:
                        x, fx, gx, i = x_new, f_new, outer_gradient(x_new, start, outer, inner), i + 1
                    else:
                        eta, i = eta / 2.0, 0
    p2, unfinished = argmax_inner(x, start, outer)
    return torch.cat([x, p2]), go or unfinished


def saddle_ff(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, True, True)


def saddle_fr(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, True, False)


def saddle_rf(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, False, True)


def saddle_rr(start: "float[2]") -> tuple["float[4]", bool]:
    return saddle(start, False, False)
