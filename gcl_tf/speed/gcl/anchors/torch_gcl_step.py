"""Reference point for speed: one GCL training step written plainly in PyTorch, from the paper's math.

The same shapes as gcl_tf's throughput benchmark: MLP trunk with memory 1000 ("mnist") or the 6-layer
ConvNet on 32x32x3 with memory 250 ("cifar"), batch 10, hidden 256, Adam. Run it in the same session and
on the same machine as the gcl_tf figure it is compared with; report the ratio, not the seconds.

    pip install torch numpy
    python torch_gcl_step.py [mnist|cifar] [steps] [cpu|cuda] [eager|compile] [step|eval]

"compile" wraps the forward pass and loss in torch.compile (needs a C++ compiler on CPU).
Prints: torch <version> regime=<r> device=<d> mode=<m> M=<M> median_ms_per_step=<ms>

gcl_tf copy (gcl_tf/speed/gcl/anchors/): the shared anchor, plus a fifth argument
``eval``, which times instead the prediction of a test batch of 500 images with 30 relaxed-Bernoulli graph samples
at temperature 0.1 (the trunk on the memory and the batch, the kernel, then per sample: noise,
normalised graph, aggregation, output head, log-softmax; averaged in probability), as gcl_tf's
30-sample evaluation computes it, and prints ``median_ms_per_image=<ms>`` as well. The training
step is the shared anchor's, unchanged. ``python -m gcl_tf.benchmark gpu`` runs it back to back
with its own rows.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

regime = sys.argv[1] if len(sys.argv) > 1 else "mnist"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
mode = sys.argv[4] if len(sys.argv) > 4 else "eager"
what = sys.argv[5] if len(sys.argv) > 5 else "step"
torch.manual_seed(0)
torch.set_default_device(device)
H, K, T = 256, 10, 10
if regime == "mnist":
    M, shape = 1000, (784,)
    trunk = nn.Sequential(nn.Linear(784, H), nn.ReLU(), nn.Linear(H, H))
else:
    M, shape = 250, (3, 32, 32)

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU()]

    trunk = nn.Sequential(*block(3, 64), *block(64, 64), nn.MaxPool2d(2), *block(64, 64), *block(64, 64),
                          nn.MaxPool2d(2), *block(64, 64), nn.MaxPool2d(2), *block(64, 64), nn.MaxPool2d(2),
                          nn.Flatten())
edge, latent = nn.Sequential(nn.ReLU(), nn.Linear(H, H)), nn.Sequential(nn.ReLU(), nn.Linear(H, H))
label_enc, head = nn.Linear(K, H), nn.Sequential(nn.ReLU(), nn.Linear(2 * H, K))
scale = nn.Parameter(torch.tensor(math.log(math.sqrt(H))))
params = [*trunk.parameters(), *edge.parameters(), *latent.parameters(), *label_enc.parameters(),
          *head.parameters(), scale]
opt = torch.optim.Adam(params, 1e-3)
mem_x, mem_y = torch.randn(M, *shape), torch.randint(0, K, (M,))
mem_edges, best = torch.randn(M, M), torch.full((M,), 0.5)
temperature = torch.tensor([1.0] * M + [5.0] * T).view(-1, 1)
no_self = 1 - torch.eye(M + T, M)


def logitexp(x):
    x = x.clamp(max=-1e-6)
    return x - torch.log(-torch.expm1(x))


def loss_fn(x, y, best):
    emb = trunk(torch.cat([mem_x, x]))
    u, l = edge(emb), latent(emb[:M])
    d = (u ** 2).sum(1, keepdim=True) + (u[:M] ** 2).sum(1) - 2 * u @ u[:M].T
    E = logitexp(-0.5 * d / scale.exp())  # [M + T, M]
    U = torch.rand_like(E).clamp(1e-6, 1 - 1e-6)
    g = torch.sigmoid((E + torch.log(U) - torch.log1p(-U)) / temperature) * no_self  # relaxed Bernoulli
    g = g / g.sum(1, keepdim=True).clamp_min(1e-12)
    out = head(g @ torch.cat([l, label_enc(F.one_hot(mem_y, K).float())], -1))
    c_loss = F.cross_entropy(out[:M], mem_y, reduction="none")
    t_loss = F.cross_entropy(out[M:], y)
    mask = (best < c_loss.detach()).float()
    pairs = mask[:, None] * mask[None, :]
    bce = F.binary_cross_entropy_with_logits(E[:M], torch.sigmoid(mem_edges), reduction="none")
    g_loss = (pairs * bce).sum() / pairs.sum().clamp_min(1)
    return t_loss + c_loss.mean() + 50 * g_loss


forward = torch.compile(loss_fn) if mode == "compile" else loss_fn


def step(x, y):
    loss = forward(x, y, best)
    opt.zero_grad()
    loss.backward()
    opt.step()


def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()


EVAL_BATCH, SAMPLES, TEST_TEMPERATURE = 500, 30, 0.1


def predict_fn(x):
    """log p(y | x, memory) averaged over SAMPLES test-time graphs [N, K] (no gradient)."""
    emb_c, emb_t = trunk(mem_x), trunk(x)
    u_c, u_t, l_c = edge(emb_c), edge(emb_t), latent(emb_c)
    d = (u_t ** 2).sum(1, keepdim=True) + (u_c ** 2).sum(1) - 2 * u_t @ u_c.T
    E = logitexp(-0.5 * d / scale.exp())  # [N, M]
    values = torch.cat([l_c, label_enc(F.one_hot(mem_y, K).float())], -1)  # [M, 2H]
    log_probs = []
    for _ in range(SAMPLES):
        U = torch.rand_like(E).clamp(1e-6, 1 - 1e-6)
        g = torch.sigmoid((E + torch.log(U) - torch.log1p(-U)) / TEST_TEMPERATURE)
        g = g / g.sum(1, keepdim=True).clamp_min(1e-12)
        log_probs.append(F.log_softmax(head(g @ values), -1))
    return torch.logsumexp(torch.stack(log_probs), 0) - math.log(SAMPLES)


predict = torch.compile(predict_fn) if mode == "compile" else predict_fn


def evaluate(x):
    trunk.eval()
    with torch.no_grad():
        predict(x)
    trunk.train()


if what == "eval":
    x = torch.randn(EVAL_BATCH, *shape)
    run, per = (lambda: evaluate(x)), EVAL_BATCH
else:
    x, y = torch.randn(T, *shape), torch.randint(0, K, (T,))
    run, per = (lambda: step(x, y)), None
for _ in range(5):
    run()
sync()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    run()
    sync()
    times.append(time.perf_counter() - t0)
times.sort()
median_ms = 1000 * times[len(times) // 2]
line = (f"torch {torch.__version__} regime={regime} device={device} mode={mode} M={M} "
        f"threads={torch.get_num_threads()} median_ms_per_step={median_ms:.1f}")
if per:
    line += f" what=eval batch={per} samples={SAMPLES} median_ms_per_image={median_ms / per:.4f}"
print(line)
