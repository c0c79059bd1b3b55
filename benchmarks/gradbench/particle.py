"""GradBench's particle eval (evals/particle/README.md of gradbench/gradbench; Pearlmutter and Siskind's charged
particle): a particle starts at (0, 8) with velocity (0.75, 0) and is pushed by -∇p, p(x; w) = 1 / ‖x - (10, 10 - w)‖
+ 1 / ‖x - (10, 0)‖, in Euler steps of 0.1 until it would cross the x axis; the cost is the square of where it
crosses it (linear from the last point), and w is found by GradBench's gradient descent (cpp/gradbench/gd.hpp) from
the given w.

Nested AD: the descent's derivative (in w) differentiates a simulation whose every step is a derivative (in x).
The four variants choose the mode of each (outer, inner): forward (jvp) or reverse (torch.func.grad). The
simulation's and gd.hpp's `while (true)` are loops of at most EULER_STEPS and STEPS iterations that stop changing
anything once stopped (kernels have no while; GradBench's input needs 355 and 92).

The exports take w0 as a float[1], not a float: a signature of scalars only has the scalar C ABI, which has no
workspace, so everything the kernel keeps (the reverse variants' residuals of the simulation's 1000 steps, 73-122 KB)
was an array on the stack (121976 B of stack for particle_rf). With a tensor argument the export takes a workspace
(P_particle_rf_workspace_size() bytes) and its stack is a few hundred bytes (tests/test_gradbench.py bounds it).
"""
import torch

EULER_STEPS = 1000    # the tool checks that the simulation and the descent stopped before these bounds
STEPS = 400
DT = 0.1
AXES = ((1.0, 0.0), (0.0, 1.0))


def potential(x: "float[2]", w: float) -> float:
    return (1.0 / torch.sqrt((x[0] - 10.0) ** 2 + (x[1] - (10.0 - w)) ** 2)
            + 1.0 / torch.sqrt((x[0] - 10.0) ** 2 + x[1] ** 2))


def force(x, w, forward):
    """-∇ in x of the potential, by one jvp per axis or by reverse mode."""
    if forward:
        return -torch.stack([torch.func.jvp(potential, (x, w), (torch.tensor(e), 0.0 * w))[1] for e in AXES])
    return -torch.func.grad(potential)(x, w)


def crossing(w, forward):
    """The Euler simulation: x_0(t_f)² where the path meets the x axis; and whether it stopped at EULER_STEPS."""
    x, xdot, go = torch.tensor([0.0, 8.0]) + 0.0 * w, torch.tensor([0.75, 0.0]), True
    for _ in range(EULER_STEPS):
        if go:
            x_new = x + DT * xdot
            if x_new[1] > 0.0:
                x, xdot = x_new, xdot + DT * force(x, w, forward)
            else:
                go = False
    x_f = x + (-x[1] / xdot[1]) * xdot
    return x_f[0] * x_f[0], go


def cost(w, forward):
    return crossing(w, forward)[0]


def cost_f(w: float) -> float:
    return cost(w, True)


def cost_r(w: float) -> float:
    return cost(w, False)


def cost_derivative(w, outer, inner):
    """d cost / d w: the derivative of a simulation whose steps are derivatives."""
    if outer:
        if inner:
            return torch.func.jvp(cost_f, (w,), (1.0 + 0.0 * w,))[1]
        return torch.func.jvp(cost_r, (w,), (1.0 + 0.0 * w,))[1]
    if inner:
        return torch.func.grad(cost_f)(w)
    return torch.func.grad(cost_r)(w)


def particle(w0, outer, inner):
    """gd.hpp's multivariate_argmin of the cost from w0 (one variable); and whether a loop hit its bound."""
    w, fw, gw = w0, cost(w0, inner), cost_derivative(w0, outer, inner)
    eta, i, go = 1e-5, 0, True
    stuck = crossing(w0, inner)[1]
    for _ in range(STEPS):
        if go:
            if abs(gw) <= 1e-5:
                go = False
            elif i == 10:
                eta, i = eta * 2.0, 0
            else:
                w_new = w - eta * gw
                if abs(w - w_new) <= 1e-5:
                    go = False
                else:
                    f_new, stuck_new = crossing(w_new, inner)
                    stuck = stuck or stuck_new
                    if f_new < fw:
                        w, fw, gw, i = w_new, f_new, cost_derivative(w_new, outer, inner), i + 1
                    else:
                        eta, i = eta / 2.0, 0
    return w, go or stuck


def particle_ff(w0: "float[1]") -> tuple[float, bool]:
    return particle(w0[0], True, True)


def particle_fr(w0: "float[1]") -> tuple[float, bool]:
    return particle(w0[0], True, False)


def particle_rf(w0: "float[1]") -> tuple[float, bool]:
    return particle(w0[0], False, True)


def particle_rr(w0: "float[1]") -> tuple[float, bool]:
    return particle(w0[0], False, False)
