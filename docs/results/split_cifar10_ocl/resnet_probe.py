"""What GCL's kernel sees on the baselines' ResNet-18 under today's protocol
(docs/reproducing/todays_protocol_diagnosis.md,
"GCL on the baselines' ResNet-18"): forward passes only, no training.

    python docs/results/split_cifar10_ocl/resnet_probe.py init --data data/cifar10.npz
    python docs/results/split_cifar10_ocl/resnet_probe.py trained RUN/learner.keras --data data/cifar10.npz

``init``: for each trunk (ResNet-18 20 filters, ConvNet 64) and augmentation (none, crop_flip, ocl),
over 3 initial seeds, 500 memory and 500 target images of task 1 (airplane, automobile) from the
training split, embedded together (training mode, as a step does), the targets' vote over the
memory's labels along the expected graph (label_vote_logits of the sigmoid of GCL's edge logits)
at the preset's width (sqrt(hidden_size) = 16).
``trained``: on 500 test images (50 a class) of a saved GCL: the edge embeddings' cosine within and
across classes, the expected test graph from task 1's images to the memory (edge quantiles, share of
the memory as effective neighbours), and a 5-fold linear probe on the trunk's features (task 1's two
classes, all ten) beside the same probe on 3 untrained trunks.
"""
import argparse

import numpy as np
import yaml

CONFIG = "configs/split_cifar10_ocl.yaml"


class _Shape:  # what build_model reads of a benchmark
    input_shape, num_classes = (32, 32, 3), 10


def gcl(backbone: str, filters: int, seed: int):
    import keras

    from gcl_tf import config as C
    from gcl_tf.train import build_model

    keras.utils.set_random_seed(seed)
    raw = yaml.safe_load(open(CONFIG))
    return build_model(C.resolve(raw, ["method.name=gcl", f"model.backbone={backbone}", f"model.filters={filters}"]),
                       _Shape)


def init(x, y):
    import tensorflow as tf

    from gcl_tf.augment import augment
    from gcl_tf.data.streams import to_float
    from gcl_tf.methods.gcl.graph import edge_logits, label_vote_logits

    idx = np.random.default_rng(0).permutation(np.where(y < 2)[0])[:1000]
    memory, targets = idx[:500], idx[500:]
    for backbone, filters in (("resnet18", 20), ("convnet", 64)):
        for name in ("none", "crop_flip", "ocl"):
            votes = []
            for seed in range(3):
                model = gcl(backbone, filters, seed)
                images = augment(to_float(x[idx]), name, tf.constant([seed, 1], tf.int32))
                u = model.embed(images, training=True)[0]
                graph = tf.sigmoid(edge_logits(u[500:], u[:500], tf.math.log(16.0)))  # the preset's width
                vote = label_vote_logits(graph, tf.one_hot(y[memory], 10))
                votes.append(np.mean(tf.argmax(vote, axis=1).numpy() == y[targets]))
            each = ", ".join(f"{100 * v:.1f}" for v in votes)
            print(f"{backbone} {name}: vote {100 * np.mean(votes):.1f}% (seeds {each})")


def probe(features, labels):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    task1 = labels < 2
    return [100 * cross_val_score(LogisticRegression(max_iter=2000), f, t, cv=5).mean()
            for f, t in ((features[task1], labels[task1]), (features, labels))]


def trained(path, x, y):
    import tensorflow as tf

    from gcl_tf.api import load_model
    from gcl_tf.data.streams import to_float
    from gcl_tf.methods.gcl.graph import edge_logits, neighbourhoods

    model = load_model(path, compile=False)
    idx = np.concatenate([np.where(y == c)[0][:50] for c in range(10)])
    images, labels = to_float(x[idx]), y[idx]
    u = model.embed(images, training=False)[0].numpy()
    unit = u / np.linalg.norm(u, axis=1, keepdims=True)
    cos, same = unit @ unit.T, labels[:, None] == labels[None]
    off = ~np.eye(len(u), dtype=bool)
    print(f"edge embeddings' cosine: {cos[same & off].mean():.3f} within a class, {cos[~same].mean():.3f} across")
    filled = int(model.memory.num_filled.numpy())
    memory = model.embed(to_float(model.memory.images[:filled]), training=False)[0]
    graph = tf.sigmoid(edge_logits(u[labels < 2], memory, model.kernel_log_scale)).numpy()
    q = np.quantile(graph, [0, 0.5, 1])
    print(f"expected edges, task 1 to the memory: {q[0]:.2f} to {q[2]:.2f} (median {q[1]:.2f}); "
          f"effective neighbours {100 * neighbourhoods(graph)[1]:.1f}% of the memory")
    feats = np.concatenate([model.trunk(images[i:i + 100], training=False).numpy() for i in range(0, 500, 100)])
    print("linear probe on its trunk: task 1 {:.0f}%, all ten {:.0f}%".format(*probe(feats, labels)))
    for seed in range(3):
        fresh = gcl("resnet18", 20, seed)
        feats = np.concatenate([fresh.trunk(images[i:i + 100], training=False).numpy() for i in range(0, 500, 100)])
        print("untrained trunk, seed {}: task 1 {:.0f}%, all ten {:.0f}%".format(seed, *probe(feats, labels)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["init", "trained"])
    parser.add_argument("learner", nargs="?", help="a GCL's learner.keras (trained)")
    parser.add_argument("--data", default="data/cifar10.npz", help="CIFAR-10 as python -m gcl_tf.data to-npz writes it")
    args = parser.parse_args()
    data = np.load(args.data)
    if args.what == "init":
        init(data["x_train"], data["y_train"])
    else:
        trained(args.learner, data["x_test"], data["y_test"])


if __name__ == "__main__":
    main()
