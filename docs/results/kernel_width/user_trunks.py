"""GCL's kernel width with a user's own trunk, through the Python API (issue 22; docs/gcl/extensions.md).

Split digits (5 tasks, 20% of each task's training data held out for validation), memory 200,
Adam 1e-3, one epoch; prints one JSON line per run with the final ACC on validation and the
accuracy on each task right after it was learned. A run is ``trunk:width:seed:method[:edge[:data]]``:

    python docs/results/kernel_width/user_trunks.py mlp:median:0:gcl:0.01 cnn:1.0:0:gcl mlp:-:0:er
    python docs/results/kernel_width/user_trunks.py cnn:median:0:gcl:0.01:cifar10   # data/cifar10.npz

``width``: median, null (the authors') or a number; ``edge``: kernel_start_edge; ``data``: digits
or cifar10 (real CIFAR-10 as data/cifar10.npz, 1000 images per task). GCL keeps the paper's head
(``own_latent=False, target_loss="all"``), the constructor's defaults when this study ran; the
defaults since (issue 33) are measured by docs/results/kernel_width/defaults_vs_er/run.py.
"""
import json
import sys
import time

import numpy as np

import gcl_tf


def run(trunk, width, seed, method, edge=0.01, data="digits"):
    import keras

    keras.utils.set_random_seed(seed)
    source = (gcl_tf.data.load("digits") if data == "digits"
              else gcl_tf.data.load("cifar10", source="npz", path="data/cifar10.npz"))
    stream = gcl_tf.benchmarks.split(source, num_tasks=5, samples_per_task=None if data == "digits" else 1000,
                                     validation_fraction=0.2, seed=seed)
    if trunk == "cnn":  # a user's two-layer CNN
        layers = [keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
                  keras.layers.Flatten()]
    else:  # the paper's MLP
        layers = [keras.layers.Flatten(), keras.layers.Dense(256, activation="relu"),
                  keras.layers.Dense(256, activation="relu")]
    backbone = keras.Sequential([keras.Input(stream.input_shape), *layers])
    if method == "gcl":
        model = gcl_tf.GCL(backbone=backbone, num_classes=10, memory_size=200, kernel_width=width,
                           kernel_start_edge=edge, own_latent=False, target_loss="all")  # the paper's head
    else:
        model = gcl_tf.ER(backbone=backbone, num_classes=10, memory_size=200)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    accuracy = np.zeros((5, 5))
    start = time.time()
    for task in stream:
        model.fit(task.train, verbose=0)
        accuracy[task.index] = [100 * model.evaluate(t.validation, verbose=0, return_dict=True)["accuracy"]
                                for t in stream]
    return {"data": data, "trunk": trunk, "width": width, "edge": edge, "method": method, "seed": seed,
            "acc": round(float(accuracy[-1].mean()), 2), "new_task": np.diag(accuracy).round(1).tolist(),
            "seconds": round(time.time() - start)}


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        parts = spec.split(":")
        trunk, width, seed, method = parts[:4]
        width = None if width == "null" else (width if width in ("median", "-") else float(width))
        edge = float(parts[4]) if len(parts) > 4 else 0.01
        print(json.dumps(run(trunk, width, int(seed), method, edge, parts[5] if len(parts) > 5 else "digits")),
              flush=True)
