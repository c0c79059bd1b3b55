"""GradBench's lstm eval (evals/lstm/README.md of gradbench/gradbench; ADBench's LSTM objective,
cpp/gradbench/evals/lstm.hpp): l layers of an LSTM with diagonal weights over b = char_bits features,
run over a sequence of c characters as bits, scored by the log-likelihood of each next character.

Layer i's parameters are rows 2 i (weights) and 2 i + 1 (biases) of main_params, each four blocks of b:
forget, input, output gates and change; its state is rows 2 i (hidden) and 2 i + 1 (cell) of state.
forget and output gates read the layer's input, the input gate and the change its hidden state:
cell = cell σ(x w_f + b_f) + σ(h w_i + b_i) tanh(h w_c + b_c), hidden = σ(x w_o + b_o) tanh(cell).
extra_params rows: in weight, out weight, out bias. ADBench's log-sum-exp adds 2 inside the log.
"""
import torch


def layer_step(x, params, state):
    """[2, b]: the new (hidden, cell) of a layer with params [2, 4, b] (weights, biases) and state [2, b]."""
    w, bias = params[0], params[1]
    hidden, cell = state[0], state[1]
    forget = torch.sigmoid(x * w[0] + bias[0])
    ingate = torch.sigmoid(hidden * w[1] + bias[1])
    outgate = torch.sigmoid(x * w[2] + bias[2])
    change = torch.tanh(hidden * w[3] + bias[3])
    new_cell = cell * forget + ingate * change
    return torch.stack([outgate * torch.tanh(new_cell), new_cell])


def lstm_objective(main_params: "float[2 * l, 4 * b]", extra_params: "float[3, b]", state: "float[2 * l, b]",
                   sequence: "float[c, b]") -> float:
    """-(1 / ((c - 1) b)) Σ_t Σ_j sequence[t + 1, j] · log-softmax-like(prediction from sequence[t])_j."""
    b, c = sequence.shape[1], sequence.shape[0]
    params = main_params.reshape(-1, 2, 4, b)            # [l, weights/biases, gate, b]
    states = state.reshape(-1, 2, b)                     # [l, hidden/cell, b]
    total = 0.0 * sequence[0, 0]
    for t in range(c - 1):
        x = sequence[t] * extra_params[0]
        layers = []
        for i in range(params.shape[0]):
            new = layer_step(x, params[i], states[i])
            x = new[0]
            layers.append(new)
        states = torch.stack(layers)
        ypred = x * extra_params[1] + extra_params[2]
        lse = torch.log(torch.sum(torch.exp(ypred)) + 2.0)
        total = total + torch.sum(sequence[t + 1] * (ypred - lse))
    return -total / ((c - 1) * b)
