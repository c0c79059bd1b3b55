"""Frontends: thin visitors that turn user sources into IR functions."""
# tensors.py fills its tables from torch_more, torch_extra, torch_losses and torch_search, which import
# tensors: loading it first here makes any of them safe to import first.
from . import tensors  # noqa: F401,E402
