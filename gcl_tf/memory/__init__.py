"""Episodic memories, one home: every memory is ``[capacity, ...]`` tf.Variables that the compiled
step updates in place (shapes never change), with stateless randomness.

- :mod:`.state`: state variables, in-place scatters, seeded sampling without replacement;
- :mod:`.reservoir`: the reservoir memory (ER, MER, DER++, ER-ACE; extra per-sample fields),
  reservoir sampling and :func:`replay_batch`, a replay batch on one device or many;
- :mod:`.graph`: GCL's graph memory (reservoir + best context losses + the learned graph);
- :mod:`.ring`: GEM's and A-GEM's per-task ring buffers;
- :mod:`.exemplars`: iCaRL's exemplar sets and class means.

Their random streams' salts are in :mod:`gcl_tf.salts`.

The size of a method's memory is its ``memory_size`` key, declared once
(:class:`gcl_tf.schema.MemoryMethodConfig`).
"""
from gcl_tf.memory.exemplars import ExemplarMemory
from gcl_tf.memory.graph import GraphMemory
from gcl_tf.memory.reservoir import ReservoirMemory, replay_batch, reservoir_slots
from gcl_tf.memory.ring import TaskMemory, per_task_memory
from gcl_tf.memory.state import (
           sample_without_replacement,
           scatter_update,
           state_variable,
           step_seed,
)

__all__ = ["ExemplarMemory", "GraphMemory", "ReservoirMemory", "TaskMemory", "per_task_memory", "replay_batch",
           "reservoir_slots", "sample_without_replacement", "scatter_update", "state_variable", "step_seed"]
