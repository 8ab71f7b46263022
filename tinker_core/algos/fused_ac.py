"""`FusedActorCritic`: PPO's actor and value MLPs evaluated together, layer by layer, for training.

The two MLPs see the same features and have the same hidden widths, so their first layers are one
``linear`` over the stacked weights and each further hidden layer one batched matmul (``baddbmm``)
over the pair: half the kernels and autograd nodes of running them one after the other. The
stacked weights are not copies: `FlatParams` lays the parameters out so that each stacked weight is
a contiguous view of the one flat buffer, and the gradient is taken with respect to those views
(they tile the buffer in order, so their gradients concatenate into the flat gradient).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinker_core.algos.flat_params import FlatParams

_ACTS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu}


def _linears(seq: nn.Sequential) -> tuple[list[nn.Linear], type | None] | None:
    """The Linear layers of a [Linear, act]* Linear stack and its activation type, else None."""
    layers = list(seq)
    lin, acts = layers[0::2], layers[1::2]
    if not all(type(m) is nn.Linear and m.bias is not None for m in lin) or len(acts) != len(lin) - 1:
        return None
    kinds = {type(a) for a in acts}
    if len(kinds) > 1 or not kinds <= set(_ACTS):
        return None
    return lin, (kinds.pop() if kinds else None)


class FusedActorCritic:
    """Built by `FusedActorCritic.build`, which also fixes the flat parameter layout."""

    def __init__(self, tiles: list[tuple[int, int, tuple[int, ...]]], n_hidden: int, act: type, flat: FlatParams):
        self.tile_specs, self.n_hidden, self.act, self.flat = tiles, n_hidden, _ACTS[act], flat

    @staticmethod
    def param_order(pi: nn.Sequential, vf: nn.Sequential) -> list[nn.Parameter] | None:
        """The order the flat buffer must hold the parameters in, or None when the pair cannot be
        fused (not plain MLPs, no hidden layer, different widths or activations)."""
        a, b = _linears(pi), _linears(vf)
        if a is None or b is None or a[1] is None or a[1] is not b[1]:
            return None
        lp, lv = a[0], b[0]
        if len(lp) != len(lv) or len(lp) < 2:
            return None
        if any(p.weight.shape != v.weight.shape for p, v in zip(lp[:-1], lv[:-1])) or lp[-1].in_features != lv[-1].in_features:
            return None
        order: list[nn.Parameter] = []
        for p, v in zip(lp[:-1], lv[:-1]):
            order += [p.weight, v.weight, p.bias, v.bias]
        return order + [lp[-1].weight, lp[-1].bias, lv[-1].weight, lv[-1].bias]

    @classmethod
    def build(cls, pi: nn.Sequential, vf: nn.Sequential, flat: FlatParams) -> "FusedActorCritic":
        """For a `FlatParams` made from ``param_order(pi, vf)`` followed by any further parameters."""
        lp, act = _linears(pi)  # type: ignore[misc]
        n_hidden = len(lp) - 1
        tiles: list[tuple[int, int, tuple[int, ...]]] = []
        off = 0
        params = flat.params
        i = 0
        for k in range(n_hidden):
            w, b = params[i], params[i + 2]
            if k == 0:
                shapes = [(2 * w.shape[0], w.shape[1]), (2 * w.shape[0],)]
            else:
                shapes = [(2, *w.shape), (2, 1, b.shape[0])]
            for shape, n in zip(shapes, (2 * w.numel(), 2 * b.numel())):
                tiles.append((off, n, shape))
                off += n
            i += 4
        for p in params[i:]:
            tiles.append((off, p.numel(), tuple(p.shape)))
            off += p.numel()
        return cls(tiles, n_hidden, act, flat)  # type: ignore[arg-type]

    def tiles(self) -> list[torch.Tensor]:
        """Views of the flat parameter, in buffer order: take gradients with respect to these."""
        f = self.flat.flat
        return [f[o:o + n].view(shape) for o, n, shape in self.tile_specs]

    def forward(self, tiles: list[torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actor latent, actor output, value [B]) for features ``x`` [B, in]."""
        B = x.shape[0]
        h = self.act(F.linear(x, tiles[0], tiles[1]))
        h = h.view(B, 2, -1).transpose(0, 1)
        t = 2
        for _ in range(1, self.n_hidden):
            h = self.act(torch.baddbmm(tiles[t + 1], h, tiles[t].transpose(1, 2)))
            t += 2
        out = F.linear(h[0], tiles[t], tiles[t + 1])
        v = F.linear(h[1], tiles[t + 2], tiles[t + 3]).squeeze(-1)
        return h[0], out, v

    def extra(self, tiles: list[torch.Tensor]) -> list[torch.Tensor]:
        """The tiles after the two networks (e.g. the log std), in the order given to `FlatParams`."""
        return tiles[2 * self.n_hidden + 4:]

    def set_grad(self, loss: torch.Tensor, tiles: list[torch.Tensor]) -> None:
        grads = torch.autograd.grad(loss, tiles, allow_unused=True)
        self.flat.flat.grad = torch.cat([(torch.zeros_like(t) if g is None else g).reshape(-1)
                                         for t, g in zip(tiles, grads)])
