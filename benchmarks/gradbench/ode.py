"""GradBench's ode eval (evals/ode/README.md of gradbench/gradbench, after cmpad's an_ode;
cpp/gradbench/evals/ode.hpp): y' = f(x, y) with f_0 = x_0 and f_i = x_i y_{i-1}, y(0) = 0, solved by
classic Runge-Kutta over [0, 2] in s equal steps; the derivative is the gradient of y_{n-1}(2) in x.

The steps come as a tensor of step sizes (all 2 / s): a loop over an int argument is differentiated by
recomputing each step's state from the start (quadratic in s), a loop over a dim stores each step's state.
"""
import torch


def rate(x, y):
    """f(x, y): x_0, then x_i y_{i-1}."""
    return x * torch.cat([torch.ones(1), y[:-1]])


def ode(x: "float[n]", steps: "float[s]") -> "float[n]":
    """y(2) after one Runge-Kutta step of each size in steps."""
    y = torch.zeros_like(x)
    for h in steps:
        k1 = rate(x, y)
        k2 = rate(x, y + h * k1 / 2.0)
        k3 = rate(x, y + h * k2 / 2.0)
        k4 = rate(x, y + h * k3)
        y = y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0
    return y


def ode_last(x: "float[n]", steps: "float[s]") -> float:
    """y_{n-1}(2), the output whose gradient GradBench asks for."""
    return ode(x, steps)[-1]
