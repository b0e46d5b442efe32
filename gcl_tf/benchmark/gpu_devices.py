"""The GPU check's devices: which devices are under test (one for the single-device rows and
placement, all of them as mirrored replicas; everything else is the host), their setup before
TensorFlow starts, the environment the report names, and whether a method's PyTorch anchor (its
step written plainly in PyTorch, run in a subprocess by its speed checks, gcl_tf/speed/)
can run here."""
from __future__ import annotations

import subprocess
import sys


class Devices:
    """The devices under test: ``single`` (the rows, the single-device placement) and
    ``replicas`` (MirroredStrategy); everything else is the host."""

    def __init__(self, kind: str, single: str, replicas: list[str]):
        self.kind, self.single, self.replicas = kind, single, list(replicas)

    @staticmethod
    def key(device: str) -> tuple:
        import tensorflow as tf

        spec = tf.DeviceSpec.from_string(device)
        return (spec.device_type or "CPU").upper(), spec.device_index or 0

    def under_test(self, device: str) -> bool:
        return self.key(device) in {self.key(d) for d in self.replicas + [self.single]}


def setup_devices(kind: str):
    """Configure TensorFlow's devices (before it starts) and return :class:`Devices`, or None
    when ``kind`` is gpu and no GPU is visible."""
    from gcl_tf.quiet import import_tensorflow

    tf = import_tensorflow()
    if kind == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
        return Devices("CPU", "/CPU:1", ["/CPU:1", "/CPU:2"])
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    for gpu in gpus:  # the PyTorch anchor runs beside this process: take GPU memory as needed
        tf.config.experimental.set_memory_growth(gpu, True)
    return Devices("GPU", "/GPU:0", [f"/GPU:{i}" for i in range(len(gpus))])


def environment(devices: Devices) -> dict:
    import keras
    import tensorflow as tf

    details = []
    for gpu in tf.config.list_physical_devices("GPU"):
        info = tf.config.experimental.get_device_details(gpu)
        details.append({"name": info.get("device_name", gpu.name),
                        "compute_capability": list(info.get("compute_capability", ()) or ())})
    return {"tensorflow": tf.__version__, "keras": keras.__version__, "device_kind": devices.kind,
            "single_device": devices.single, "replica_devices": devices.replicas, "gpus": details,
            "logical_devices": [d.name for d in tf.config.list_logical_devices()]}


def torch_probe(device_kind: str) -> tuple[dict | None, str]:
    """``(info, note)``: torch's version when it is importable in this Python (with CUDA when the
    check runs on GPUs), else None and a one-line note saying why the anchor rows are skipped."""
    code = "import torch; print(torch.__version__, torch.cuda.is_available())"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "PyTorch anchor skipped: importing torch took over 5 minutes"
    if proc.returncode != 0:
        return None, "PyTorch anchor skipped: torch is not importable here (pip install torch to compare)"
    version, cuda = proc.stdout.split()[-2:]
    if device_kind == "GPU" and cuda != "True":
        return None, f"PyTorch anchor skipped: torch {version} has no CUDA (a CPU-only build)"
    return {"version": version, "cuda": cuda == "True"}, ""
