"""GCL's own speed checks (gcl_tf/speed/__init__.py says what a method's speed checks hold):
its training step and evaluation timed, as fractions of a dense matmul and of their analytic FLOPs,
and against the plain PyTorch step of the same shapes (``anchors/torch_gcl_step.py``).

- :mod:`.throughput`: ``python -m gcl_tf.benchmark throughput`` (docs/performance.md), its sections
  and report; :mod:`.against_torch` its section against PyTorch; :mod:`.flops` the analytic FLOPs
  of GCL's step and evaluation, and the GEMMs of its step;
- :mod:`.gpu`: ``python -m gcl_tf.benchmark gpu``, the GPU check (docs/gpu.md); its parts:
  :mod:`.rows` (the speed rows), :mod:`.anchor` (the PyTorch anchor), :mod:`.placement` (a GCL
  model on one device, a mirrored continual run), :mod:`.report` (gpu_check.md).

The generic machinery they use (clocks, the matmul reference, the models and steps timed, the
devices, the placement analysis, the verdict on XLA) is gcl_tf/benchmark/'s.
"""

#: The config sections GCL's speed checks build it with (gcl_tf.speed.make_model):
#: the paper's head and loss, the math of the PyTorch anchor (anchors/torch_gcl_step.py), and its
#: optimizer (Adam, learning rate 0.001); the keys a check passes win over the method's.
SETTINGS = {"method": {"own_latent": False, "target_loss": "all"},
            "train": {"optimizer": "adam", "learning_rate": 0.001}}
