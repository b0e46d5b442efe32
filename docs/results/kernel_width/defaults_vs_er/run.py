"""Issue 33 item 5: GCL defaults vs ER on trunks nobody tuned GCL for (validation only).

    python docs/results/kernel_width/defaults_vs_er/run.py SETUP METHOD SEED [JSON_KWARGS]
SETUP: digits_cnn (split digits, 2 x Conv2D 64 + pool + flatten, M=200) or
       cifar_convnet (real CIFAR-10, 5 x 500, authors' ConvNet, M=100).
Adam 1e-3, one epoch, batch 10; VF (default 20%) of each task's training data held out (validation).
"""
import json
import os
import sys
import time

import numpy as np

import gcl_tf
import gcl_tf.backbones

LR = 1e-3
CNN = os.environ.get('CNN', 'valid')
VF = float(os.environ.get('VF', '0.2'))
SPLIT = os.environ.get('SPLIT', 'validation')


def run(setup, method, seed, kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    if setup == "digits_cnn":
        source = gcl_tf.data.load("digits")
        stream = gcl_tf.benchmarks.split(source, num_tasks=5, validation_fraction=VF, seed=seed)
        if CNN == "same":
            layers = [keras.layers.Conv2D(64, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
                      keras.layers.Conv2D(64, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
                      keras.layers.Flatten()]
        else:  # valid convolutions, one pool: 8 -> 6 -> 4 -> 2, 256 features
            layers = [keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
                      keras.layers.MaxPooling2D(2), keras.layers.Flatten()]
        backbone = keras.Sequential([keras.Input(stream.input_shape), *layers])
        memory = 200
    else:
        source = gcl_tf.data.load("cifar10", source="npz", path="data/cifar10.npz")
        stream = gcl_tf.benchmarks.split(source, num_tasks=5, samples_per_task=round(500 / (1 - VF)),
                                         validation_fraction=VF, seed=seed)
        backbone = gcl_tf.backbones.convnet(stream.input_shape)
        memory = 100
    if method == "gcl":
        model = gcl_tf.GCL(backbone=backbone, num_classes=10, memory_size=memory, seed=seed, **kwargs)
    else:
        model = gcl_tf.ER(backbone=backbone, num_classes=10, memory_size=memory, seed=seed, **kwargs)
    model.compile(optimizer=keras.optimizers.Adam(LR))
    accuracy = np.zeros((5, 5))
    diag = []
    start = time.time()
    for task in stream:
        model.fit(task.train, verbose=0)
        accuracy[task.index] = [
            100 * model.evaluate(t.validation if SPLIT == "validation" else t.test, verbose=0,
                                 return_dict=True)["accuracy"] for t in stream]
        if method == "gcl":
            from gcl_tf.methods.gcl.graph import neighbourhoods
            from gcl_tf.methods.gcl.prediction import first_examples
            images, labels = first_examples(task.validation if SPLIT == "validation" else task.test, 200)
            acc_now, g = model.accuracy_and_test_graph(images, labels)
            no_edge, spread = neighbourhoods(g)
            mem_labels = model.memory.labels.numpy()[:g.shape[1]]
            w = g / np.maximum(g.sum(1, keepdims=True), 1e-30)
            purity = float(np.mean((w * (mem_labels[None, :] == labels[:, None])).sum(1)))
            diag.append({"s": round(float(model.kernel_log_scale.numpy()), 3), "no_edge": round(no_edge, 3),
                         "spread": round(spread, 3), "purity": round(purity, 3)})
    return {"setup": setup, "method": method, "seed": seed, "kwargs": kwargs, "lr": LR, "cnn": CNN, "vf": VF,
            "split": SPLIT,
            "acc": round(float(accuracy[-1].mean()), 2), "new_task": np.diag(accuracy).round(1).tolist(),
            "diag": diag, "seconds": round(time.time() - start)}


if __name__ == "__main__":
    setup, method, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    LR = kwargs.pop("lr", 1e-3)
    out = run(setup, method, seed, kwargs)
    print(json.dumps(out), flush=True)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.jsonl"), "a") as f:
        f.write(json.dumps(out) + "\n")
