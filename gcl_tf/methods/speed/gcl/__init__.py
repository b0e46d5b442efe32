"""GCL's own speed checks (gcl_tf/methods/speed/__init__.py says what a method's speed checks hold)."""

#: The config sections GCL's speed checks build it with (gcl_tf.benchmark.workloads.make_model):
#: the paper's head and loss, the math of the PyTorch anchor (torch_gcl_step.py), and its
#: optimizer (Adam, learning rate 0.001); the keys a check passes win over the method's.
SETTINGS = {"method": {"own_latent": False, "target_loss": "all"},
            "train": {"optimizer": "adam", "learning_rate": 0.001}}
