"""GCL: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021), one concern per module (this
package's ``__init__`` imports none of them: :mod:`.config` is read before TensorFlow loads):

- :mod:`.graph`: the pure math (kernel, edge logits, relaxed-Bernoulli graphs, normalisation,
  the graph regulariser, the edge memory's update, the average of sample predictions);
- :mod:`.caches`: the evaluation caches (test-time noise, the memory's embeddings);
- the graph memory (reservoir + best losses + the learned context graph): :mod:`gcl_tf.memory.graph`;
- :mod:`.config`: its keys (``Config``: ranges, the paper's defaults);
- :mod:`.model`: the Keras model (``GCL``): construction, memory estimate, building blocks;
- :mod:`.training`: its training step in named parts (a mixin of ``GCL``);
- :mod:`.prediction`: its predictions and evaluation caches (a mixin of ``GCL``).
"""
