"""Anchor: gcl_tf's OnPro step under today's protocol (configs/split_cifar10_ocl.yaml's onpro preset),
written plainly in PyTorch (eager, CPU), to time against gcl_tf's own step (onpro_vs_torch.py beside
this file runs both in turns). The shapes and losses are gcl_tf/methods/onpro.py's step after the
first task (``later_task_terms``: the step nearly every step of a run takes), with the same
tensor sizes; the random draws are PyTorch's own (nothing here is meant to match ours bit for bit).

One step, batch B = 10 incoming CIFAR-10-shaped images, D = 64 drawn from a full 500-image memory:
  1. APF: of the D replay images, floor(0.75 D) mixed among themselves (each with probability 0.6,
     weight U(0, 0.6), a random partner), the rest replaced by mixups (Beta(0.4, 0.4)) of two stored
     samples of a class pair drawn by the softmax of 1 / ||mean_i - mean_j|| over the class means;
  2. views: each of x and the mixed replay batch rotated R ways (16: the image, its halves turned,
     each by 0, 180, 90, 270 degrees; OCM's), then the authors' transform of every rotated copy
     (flip 0.5, grayscale 0.25, random resized crop of area 0.3-1): 2 R (B + D) images in ONE trunk
     run (training-mode BatchNorm), a projection to 128, both normalised;
  3. OCM's instance contrast: x's [2RB, 2RB] similarities (NT-Xent with the view pairs), the mixed
     replay's [2RD, 2RD] (NT-Xent "uni"), each projection against itself and a random 128-wide slice
     of the features, scaled by sim_lambda 0.5, temperature 0.07;
  4. the head's mixup cross-entropy on the authors' transform of the mixed replay (D images, a
     second trunk run); OPE (prototype contrast, temperature 0.5) on x's first views and on the
     replay batch and its transform (2 D images, a third trunk run); its class means kept for APF;
  5. L2 weight decay 0.5 * 1e-4 * sum w^2 in the loss (the authors' Adam weight_decay), backward,
     an Adam step (lr 5e-4), then the incoming batch reservoir-inserted into the memory.
With R = 16 a step sends 2 x 16 x 74 + 64 + 128 = 2,560 images through the trunk.

    pip install torch numpy   # CPU wheels, in a virtualenv of its own
    python torch_onpro_step.py [--nf 20] [--rotations 16] [--steps 10] [--warmup 2] [--threads T]

Prints one JSON line: {"framework": "pytorch", "method": "onpro", "nf": .., "median_ms": .., ...}.
On a machine shared with other jobs set OMP_WAIT_POLICY=PASSIVE (or --threads 1): PyTorch's
spinning OpenMP threads lose their cores to the neighbours (../shared/anchors/torch_er_ocl_step.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SHAPE, NUM_CLASSES, EPS = (3, 32, 32), 10, 1e-8
PROJECTION, INS_T, PROTO_T, SIM_LAMBDA, WEIGHT_DECAY = 128, 0.07, 0.5, 0.5, 1e-4
MIX_BASE, MIX_P, MIX_ALPHA, MIX_UPPER = 0.75, 0.6, 0.4, 0.6
LUMA = (0.299, 0.587, 0.114)


# ---------------------------------------------------------------------------------------- model
class Block(nn.Module):
    """A BasicBlock: two 3x3 convolutions with BatchNorm, a 1x1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.skip(x))


class Trunk(nn.Module):
    """GEM's reduced ResNet-18 (gcl_tf/backbones.py's resnet18): 8 nf features."""

    def __init__(self, nf: int):
        super().__init__()
        layers, cin = [nn.Conv2d(3, nf, 3, 1, 1, bias=False), nn.BatchNorm2d(nf), nn.ReLU()], nf
        for mult, stride in [(1, 1), (2, 2), (4, 2), (8, 2)]:
            layers += [Block(cin, nf * mult, stride), Block(nf * mult, nf * mult, 1)]
            cin = nf * mult
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.body(x), 1).flatten(1)


class OnProNet(nn.Module):
    def __init__(self, nf: int):
        super().__init__()
        self.trunk, self.head = Trunk(nf), nn.Linear(8 * nf, NUM_CLASSES)
        self.projection = nn.Linear(8 * nf, PROJECTION)

    def embed(self, x):
        features = self.trunk(x)
        return F.normalize(features, dim=1), F.normalize(self.projection(features), dim=1)


# --------------------------------------------------------------------------------- the views
def rotate(x: torch.Tensor, count: int) -> torch.Tensor:
    """OCM's rotated copies [count N, C, H, W], copy-major (onpro.py's rotate)."""
    if count == 1:
        return x
    if count == 16:
        half = x.shape[-1] // 2
        left, right = x[..., :half], x[..., half:]
        tl, tr = left.flip(-2, -1), right.flip(-2, -1)
        x = torch.cat([x, torch.cat([tl, right], -1), torch.cat([tl, tr], -1), torch.cat([left, tr], -1)])
    return torch.cat([torch.rot90(x, k, (-2, -1)) for k in (0, 2, 1, 3)])


def authors_transform(x: torch.Tensor) -> torch.Tensor:
    """Flip (0.5), grayscale (0.25), then a random resized crop of area 0.3-1 (aspect 3/4-4/3,
    clamped to fit), resized back bilinearly: one affine_grid + grid_sample for the batch."""
    n = x.shape[0]
    gray = (x * x.new_tensor(LUMA).view(1, 3, 1, 1)).sum(1, keepdim=True).expand_as(x)
    x = torch.where(torch.rand(n, 1, 1, 1) < 0.25, gray, x)
    area = torch.empty(n).uniform_(0.3, 1.0)
    aspect = torch.empty(n).uniform_(math.log(3 / 4), math.log(4 / 3)).exp()
    sx, sy = (area * aspect).sqrt().clamp(max=1.0), (area / aspect).sqrt().clamp(max=1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = torch.where(torch.rand(n) < 0.5, -sx, sx)
    theta[:, 0, 2] = (torch.rand(n) * 2 - 1) * (1 - sx)
    theta[:, 1, 1] = sy
    theta[:, 1, 2] = (torch.rand(n) * 2 - 1) * (1 - sy)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def views(x: torch.Tensor, rotations: int) -> torch.Tensor:
    rotated = rotate(x, rotations)
    return torch.cat([rotated, authors_transform(rotated)])


# ---------------------------------------------------------------------------------- the losses
def similarity(z, features):
    start = int(torch.randint(0, features.shape[1] - z.shape[1], ()))
    return SIM_LAMBDA * z @ (features[:, start:start + z.shape[1]] + z).T


def contrast_terms(sim, labels, exclude_self: bool):
    labels = labels.repeat(2)
    scores = torch.exp((sim - sim.max(1, keepdim=True).values.detach()) / INS_T)
    if exclude_self:
        scores = scores * (1 - torch.eye(sim.shape[0]))
    nll = -torch.log(scores / (scores.sum(1, keepdim=True) + EPS) + EPS)
    same = (labels[:, None] == labels[None, :]).float()
    return nll, same / (same.sum(1, keepdim=True) + EPS)


def nt_xent(sim, labels):
    """OCM's Supervised_NT_xent_n (onpro.py's nt_xent)."""
    b = sim.shape[0] // 2
    nll, positives = contrast_terms(sim, labels, exclude_self=True)
    pairs = torch.diagonal(nll[:b, b:]) + torch.diagonal(nll[b:, :b])
    return pairs.sum() / (2.0 * b) + (positives * nll).sum() / b


def nt_xent_uni(sim, labels):
    nll, positives = contrast_terms(sim, labels, exclude_self=False)
    return (positives * nll).sum() / sim.shape[0]


def ope_loss(z1, z2, labels):
    """OPE: NT-Xent between the two views' class prototypes; the prototypes' mean for APF."""
    onehot = F.one_hot(labels, NUM_CLASSES).float()
    counts = onehot.sum(0)
    p1, p2 = [(onehot.T @ z) / counts.clamp(min=1)[:, None] for z in (z1, z2)]
    present = (counts > 0).float().repeat(2)
    z = torch.cat([F.normalize(p1, dim=1), F.normalize(p2, dim=1)])
    logits = z @ z.T / PROTO_T
    others = present[None, :] * (1 - torch.eye(2 * NUM_CLASSES))
    log_prob = logits - torch.log((logits.exp() * others).sum(1) + (1 - present))[:, None]
    partner = torch.cat([torch.arange(NUM_CLASSES, 2 * NUM_CLASSES), torch.arange(NUM_CLASSES)])
    positive = log_prob.gather(1, partner[:, None]).squeeze(1)
    return -(present * positive).sum() / present.sum().clamp(min=1), (p1 + p2).detach() / 2


# ----------------------------------------------------------------------------------------- APF
def feedback(images, labels, mem_x, mem_y, means):
    """APF's mixed replay batch: ``(images, first labels, second labels, weight)`` [D]."""
    d = images.shape[0]
    base = int(math.floor(d * MIX_BASE))
    partner = torch.randperm(d)
    w = torch.where(torch.rand(d) < MIX_P, torch.empty(d).uniform_(0, MIX_UPPER), torch.zeros(d))
    w[base:] = 0
    distance = torch.cdist(means, means)
    upper = torch.triu(torch.ones(NUM_CLASSES, NUM_CLASSES, dtype=torch.bool), 1)
    pair_p = torch.softmax(torch.where(upper, 1 / distance.clamp(min=1e-12), torch.tensor(-float("inf"))).flatten(), 0)
    pairs = torch.multinomial(pair_p, d - base, replacement=True)
    first_class, second_class = pairs // NUM_CLASSES, pairs % NUM_CLASSES
    slots = [torch.multinomial(((mem_y[None, :] == c[:, None]).float() + 1e-6), 1).squeeze(1)
             for c in (first_class, second_class)]
    beta = torch.distributions.Beta(MIX_ALPHA, MIX_ALPHA).sample((d - base,))
    x1 = torch.cat([images[:base], mem_x[slots[0]]])
    x2 = torch.cat([images[partner[:base]], mem_x[slots[1]]])
    y1, y2 = torch.cat([labels[:base], mem_y[slots[0]]]), torch.cat([labels[partner[:base]], mem_y[slots[1]]])
    w = torch.cat([w[:base], beta])
    return (1 - w[:, None, None, None]) * x1 + w[:, None, None, None] * x2, y1, y2, w


# ----------------------------------------------------------------------------------------- step
def onpro_loss(net, x, y, mem_x, mem_y, state, rotations: int, replay: int):
    idx = torch.randperm(mem_x.shape[0])[:replay]
    images, labels = mem_x[idx], mem_y[idx]
    with torch.no_grad():
        mixed, first, second, w = feedback(images, labels, mem_x, mem_y, state["means"])
        x_views, m_views = views(x, rotations), views(mixed, rotations)
    features, z = net.embed(torch.cat([x_views, m_views]))  # one trunk run: 2 R (B + D) images
    cut = x_views.shape[0]
    mixed_labels = (1 - w) * first.float() + w * second.float()
    instance = (nt_xent(similarity(z[:cut], features[:cut]), y.float().repeat(rotations))
                + nt_xent_uni(similarity(z[cut:], features[cut:]), mixed_labels.repeat(rotations)))
    with torch.no_grad():
        shown = authors_transform(mixed)
    logits = net.head(net.trunk(shown))
    ce = ((1 - w) * F.cross_entropy(logits, first, reduction="none")
          + w * F.cross_entropy(logits, second, reduction="none")).mean()
    with torch.no_grad():
        pair = torch.cat([images, authors_transform(images)])
    _, zm = net.embed(pair)
    seen, state["means"] = ope_loss(zm[:replay], zm[replay:], labels)
    n = x.shape[0]
    new, _ = ope_loss(z[:n], z[cut // 2:cut // 2 + n], y)
    decay = 0.5 * WEIGHT_DECAY * sum((p * p).sum() for p in net.parameters())
    return ce + instance + seen + new + decay


def reservoir(mem_x, mem_y, x, y, seen: int) -> int:
    n = seen + torch.arange(1, x.shape[0] + 1)
    slot = torch.floor(torch.rand(x.shape[0]) * n).long()
    keep = slot < mem_x.shape[0]
    mem_x[slot[keep]], mem_y[slot[keep]] = x[keep], y[keep]
    return seen + x.shape[0]


def build_step(nf: int = 20, rotations: int = 16, batch: int = 10, replay: int = 64, memory: int = 500,
               seed: int = 0):
    """``(step, parameters)``: ``step()`` runs one OnPro step (after the first task, memory full)
    and returns its loss; onpro_vs_torch.py times it in turns with ours."""
    torch.manual_seed(seed)
    net = OnProNet(nf).train()
    opt = torch.optim.Adam(net.parameters(), lr=5e-4)
    mem_x, mem_y = torch.rand(memory, *SHAPE), torch.randint(0, NUM_CLASSES, (memory,))
    x, y = torch.rand(batch, *SHAPE), torch.randint(0, NUM_CLASSES, (batch,))
    state, seen = {"means": torch.randn(NUM_CLASSES, PROJECTION)}, [memory]

    def step() -> float:
        loss = onpro_loss(net, x, y, mem_x, mem_y, state, rotations, min(replay, memory))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seen[0] = reservoir(mem_x, mem_y, x, y, seen[0])
        return loss.item()

    return step, sum(p.numel() for p in net.parameters())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nf", type=int, default=20)
    parser.add_argument("--rotations", type=int, choices=[1, 4, 16], default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--replay", type=int, default=64)
    parser.add_argument("--memory", type=int, default=500)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    step, params = build_step(args.nf, args.rotations, args.batch, args.replay, args.memory, args.seed)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        assert math.isfinite(step())
        times.append(1000.0 * (time.perf_counter() - start))
    p10, median, p90 = (float(v) for v in np.percentile(times, [10, 50, 90]))
    print(json.dumps({"framework": "pytorch", "method": "onpro", "nf": args.nf, "rotations": args.rotations,
                      "median_ms": round(median, 2), "p10_ms": round(p10, 2), "p90_ms": round(p90, 2),
                      "steps": args.steps, "threads": torch.get_num_threads(), "batch": args.batch,
                      "replay": args.replay, "params": params,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "version": torch.__version__}))


if __name__ == "__main__":
    main()
