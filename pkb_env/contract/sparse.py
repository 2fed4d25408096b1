"""Sparse tensor inputs (contract v3): a spec declares the format and how many entries are stored; the judge
draws the positions and values from the input's secret stream, and treats the stored parts as the tensor.

PKB's spherical convolution (62) and GNN backward (66) take sparse operators. A sparse input is declared on
a `Tensor`, `Tensor("psi", ("K", "P", "Q"), sparse=Sparse("coo", density=0.05))`: `nnz` stored entries
(an expression, or `density` of the declared local shape) at distinct positions drawn uniformly from the
input's stream, values from its `dist` in its dtype (the task dtype by default), coalesced (COO) or
compressed by rows (CSR, 2-D only). A `Custom` distribution may make a structured operator instead (a band, a
fixed number per row): it must return the declared format, shape and dtype, which the judge checks.

Wherever the judge treats inputs as tensors (cloning per call, detecting mutation, aliasing, byte counts) a
sparse tensor is its parts, plain dense tensors (`parts`): indices and values for COO, row pointers, column
indices and values for CSR. So a candidate that scales the values in place is caught like one that writes
to a dense input, and the cost model's `c.nbytes` counts indices and values (`stored_bytes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

import torch

from pkb_env.contract.expr import Expr, Size, as_expr, show

FORMATS = {"coo": torch.sparse_coo, "csr": torch.sparse_csr}
INDEX_BYTES = 8  # int64 indices, torch's default for both formats


@dataclass(frozen=True)
class Sparse:
    """A sparse input's format and size: `nnz` stored entries (an expression) or `density` of the local shape."""

    format: str = "coo"
    nnz: Size | None = None
    density: float | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"sparse format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if (self.nnz is None) == (self.density is None):
            raise ValueError("a Sparse input declares exactly one of nnz= (an expression) and density= (in (0, 1])")
        if self.density is not None and not 0 < self.density <= 1:
            raise ValueError(f"density must be in (0, 1], got {self.density}")
        if self.nnz is not None:
            object.__setattr__(self, "nnz", as_expr(self.nnz))

    @property
    def layout(self) -> torch.layout:
        return FORMATS[self.format]

    def count(self, shape: tuple[int, ...], env: Mapping[str, float]) -> int:
        """Stored entries of a local block of `shape`; at least one, at most every element."""
        numel = 1
        for s in shape:
            numel *= s
        n = self.nnz.integer(env) if isinstance(self.nnz, Expr) else round(self.density * numel)
        if not 1 <= n <= numel:
            raise ValueError(f"a sparse block of shape {shape} holds 1 to {numel} entries; nnz is {n}")
        return n

    def stored_bytes(self, shape: tuple[int, ...], element_bytes: int, env: Mapping[str, float]) -> int:
        """Bytes of the parts a kernel reads: values and indices (COO: one int64 per dimension per entry; CSR:
        a column index per entry and rows + 1 row pointers)."""
        n = self.count(shape, env)
        if self.format == "csr":
            return n * (element_bytes + INDEX_BYTES) + (shape[0] + 1) * INDEX_BYTES
        return n * (element_bytes + len(shape) * INDEX_BYTES)

    def describe(self) -> str:
        size = f"nnz = {show(self.nnz)}" if self.nnz is not None else f"density {self.density:g}"
        return f"sparse {self.format.upper()}, {size}"


def draw(sparse: Sparse, values, gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype,
         env: Mapping[str, float]) -> torch.Tensor:
    """A sparse tensor of `shape`: distinct positions drawn uniformly from `gen`, values from the input's
    distribution (`values`, drawn from the same stream after the positions)."""
    n = sparse.count(shape, env)
    numel = 1
    for s in shape:
        numel *= s
    flat = torch.randperm(numel, generator=gen, device=gen.device)[:n].sort().values
    index = torch.stack(torch.unravel_index(flat, shape))
    coo = torch.sparse_coo_tensor(index, values.draw(gen, (n,), dtype, env), shape, dtype=dtype, is_coalesced=True,
                                  check_invariants=False)
    return coo.to_sparse_csr() if sparse.format == "csr" else coo


def is_sparse(t: torch.Tensor) -> bool:
    return t.layout in FORMATS.values()


def parts(t: torch.Tensor, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The dense tensors a tensor is made of: itself, or a sparse tensor's stored parts (views, not copies)."""
    if t.layout == torch.sparse_coo:
        yield f"{path}.indices", t._indices()
        yield f"{path}.values", t._values()
    elif t.layout == torch.sparse_csr:
        yield f"{path}.crow_indices", t.crow_indices()
        yield f"{path}.col_indices", t.col_indices()
        yield f"{path}.values", t.values()
    else:
        yield path, t
