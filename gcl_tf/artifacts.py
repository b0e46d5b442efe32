"""Arrays for the figures, from a trained learner: ``gcl_tf.train`` writes them at the end of a run
(``DIR/artifacts.npz``) and ``python -m gcl_tf.benchmark plots`` draws them (t-SNE of the
penultimate embeddings with the class embeddings, GCL's context graph).

What is read from the learner, hooks of every method with defaults (gcl_tf/methods/hooks.py):
``penultimate(x)``, the features ``[N, D]`` the last linear layer reads; ``output_layer()``, that
layer, whose kernel's columns are the class embeddings; ``context_graph()``, ``(graph [C, C],
labels [C])`` of a method that learns a graph over its memory (GCL), else None.
"""
from __future__ import annotations

import numpy as np


def evaluation_images(benchmark, split: str, num_images: int):
    """A fixed subset of ``num_images`` evaluation images spread evenly over all tasks (each
    task's first ones in split order): ``(images, labels, tasks)``."""
    per_task = -(-num_images // len(benchmark.tasks))
    images, labels, task_ids = [], [], []
    for task in benchmark.tasks:
        data = task.eval_data(split)
        images.append(data.images[:per_task])
        labels.append(data.labels[:per_task])
        task_ids.append(np.full(len(labels[-1]), task.index))
    return (np.concatenate(images)[:num_images], np.concatenate(labels)[:num_images],
            np.concatenate(task_ids)[:num_images])


def export_artifacts(model, benchmark, split: str = "test", num_images: int = 1000) -> dict:
    """Arrays for the figures: penultimate embeddings of :func:`evaluation_images`, their labels
    and tasks, the class embeddings, and the context graph with its memory labels (what the
    model has of these)."""
    from gcl_tf.data.streams import to_float

    out = {}
    images, labels, tasks = evaluation_images(benchmark, split, num_images)
    chunk = model.eval_batch_size or 500
    features = [model.penultimate(to_float(images[i:i + chunk])) for i in range(0, len(images), chunk)]
    if features and features[0] is not None:
        out["embeddings"] = np.concatenate([np.asarray(f, np.float32) for f in features])
        out["embedding_labels"] = labels.astype(np.int64)
        out["embedding_tasks"] = tasks.astype(np.int64)
        layer = model.output_layer()
        if layer is not None:
            out["class_embeddings"] = np.asarray(layer.kernel, np.float32).T  # [K, D]
    graph = model.context_graph()
    if graph is not None:
        out["context_graph"], out["memory_labels"] = (np.asarray(graph[0], np.float32),
                                                      np.asarray(graph[1], np.int64))
    return out
