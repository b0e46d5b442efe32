"""GCL: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021), one concern per module:

- :mod:`.graph`: the pure math (kernel, edge logits, relaxed-Bernoulli graphs, normalisation,
  the graph regulariser, the edge memory's update, the average of sample predictions);
- :mod:`.caches`: the evaluation caches (test-time noise, the memory's embeddings);
- the graph memory (reservoir + best losses + the learned context graph): :mod:`gcl_tf.memory.graph`;
- :mod:`.config`: its keys (``Config``: ranges, the paper's defaults);
- :mod:`.model`: the Keras model (``GCL``): construction, memory estimate, building blocks;
- :mod:`.training`: its training step in named parts (a mixin of ``GCL``);
- :mod:`.prediction`: its predictions and evaluation caches (a mixin of ``GCL``).
"""
from gcl_tf.memory import GraphMemory, step_seed
from gcl_tf.methods.base import cross_entropy, mask_logits
from gcl_tf.methods.gcl.caches import TEST_NOISE_CACHE_BYTES, ContextCache, TestNoiseCache, keep
from gcl_tf.methods.gcl.config import Config
from gcl_tf.methods.gcl.graph import (
    LOG_KERNEL_MAX,
    ROW_EPS,
    average_log_probs,
    context_graph_regularizer,
    context_graph_regularizer_fused,
    edge_logits,
    expected_graph,
    graph_regularizer,
    kernel_factors,
    logistic_noise,
    logit_of_exp,
    normalize_rows,
    rbf_log_kernel,
    regularized_contexts,
    relaxed_bernoulli,
    replaced_source_index,
    sample_graph,
    sampled_graph,
    squared_distances,
    update_edge_memory,
)
from gcl_tf.methods.gcl.model import GCL

__all__ = [
    "step_seed",
    "cross_entropy",
    "mask_logits",
    "TEST_NOISE_CACHE_BYTES",
    "ContextCache",
    "TestNoiseCache",
    "keep",
    "LOG_KERNEL_MAX",
    "ROW_EPS",
    "average_log_probs",
    "context_graph_regularizer",
    "context_graph_regularizer_fused",
    "edge_logits",
    "expected_graph",
    "graph_regularizer",
    "kernel_factors",
    "logistic_noise",
    "logit_of_exp",
    "normalize_rows",
    "rbf_log_kernel",
    "regularized_contexts",
    "relaxed_bernoulli",
    "replaced_source_index",
    "sample_graph",
    "sampled_graph",
    "squared_distances",
    "update_edge_memory",
    "GraphMemory",
    "Config",
    "GCL",
]
