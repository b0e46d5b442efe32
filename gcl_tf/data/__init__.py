"""Data: sources -> continual protocols -> tf.data streams."""
from gcl_tf.data.protocols import ContinualBenchmark, Task
from gcl_tf.data.sources import SOURCES, SplitData, make_source, read_idx

__all__ = ["ContinualBenchmark", "Task", "SOURCES", "SplitData", "make_source", "read_idx"]
