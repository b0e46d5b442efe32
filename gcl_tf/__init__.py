"""gcl_tf: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021) and its baselines in TensorFlow/Keras."""

__version__ = "0.1.0"
