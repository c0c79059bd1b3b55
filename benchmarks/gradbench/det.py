"""GradBench's det eval: the determinant of A [l, l] by expansion by minors (evals/det/README.md of
gradbench/gradbench, after cmpad's det_by_minor; cpp/gradbench/evals/det.hpp).

GradBench's C++ recurses: the determinant of a minor is the alternating sum, along the minor's first row, of
each element times the determinant of the sub-minor without that row and column. ksbuild kernels have no
recursion (a located error) and no size 2 ** l, so this port computes the same expansion bottom-up: a minor is
named by its set of columns S (its rows are the last |S| of A), every minor of the table at once, and the
l-th sweep of "each minor from its sub-minors" holds every determinant (sweep k finishes the minors of k
columns). The integer tables (which row each minor expands along, the sub-minor of each column, the signs)
depend on l alone: the tool makes them (evals.det_tables) and they set m = 2 ** l. Each minor's determinant is
computed once, so F does l² 2^l multiplications where the recursion does about e l!: F is not comparable
with GradBench's, J/F is.
"""
import torch


def det(A: "float[l, l]", rows: "i64[m]", minors_of: "i64[m, l]", signs: "float[m, l]") -> float:
    """det A = the minor of every column (the table's last entry); the empty minor (entry 0) is 1."""
    terms = signs * A[rows]                               # [m, l]: ± A[first row of S, j] for j in S, else 0
    empty = torch.where(torch.arange(rows.shape[0]) == 0, 1.0, 0.0)
    minors = empty
    for _ in range(A.shape[0]):
        minors = empty + torch.sum(terms * minors[minors_of], dim=1)
    return minors[-1]
