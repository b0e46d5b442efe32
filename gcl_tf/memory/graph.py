"""GCL's episodic memory: a reservoir memory plus the per-slot best context loss and the learned
context graph."""
from __future__ import annotations

import math

import tensorflow as tf

from gcl_tf.memory.reservoir import ReservoirMemory
from gcl_tf.memory.state import state_variable


class GraphMemory(ReservoirMemory):
    """Reservoir memory plus GCL's per-slot best context loss and its learned context graph:
    ``edge_logits`` [M, M] (``edge_memory="matrix"``) or ``edge_embeddings`` [M, H]
    (``"embeddings"``: linear memory, stored logits recomputed with the kernel)."""

    def __init__(self, capacity, image_shape, seed=0, edge_memory="matrix", embedding_size=None, name="memory"):
        super().__init__(capacity, image_shape, seed=seed, name=name)
        self.edge_memory = edge_memory
        with self.name_scope:
            self.best_loss = state_variable(tf.fill([capacity], math.inf), "best_loss")
            if edge_memory == "matrix":
                self.edge_logits = state_variable(tf.zeros([capacity, capacity]), "edge_logits")
            else:
                self.edge_embeddings = state_variable(tf.zeros([capacity, embedding_size]), "edge_embeddings")
