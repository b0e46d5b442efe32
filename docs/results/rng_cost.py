"""Cost of the logistic noise of one GCL training step (memory 1000, batch 10: [1010, 1000]
variates) with TensorFlow's CPU generator, on 1 and 2 intra-op threads, and compiled by XLA.

    python docs/results/rng_cost.py            # 2 threads (the default here)
    python docs/results/rng_cost.py --threads 1
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from gcl_tf.methods.gcl.graph import logistic_noise


def median_ms(fn, repeats=40):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TensorFlow's default)")
    args = parser.parse_args()
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    seed = tf.Variable([1, 2])  # a variable: nothing constant-folds
    for name, jit in (("TensorFlow", False), ("XLA", True)):
        draw = tf.function(lambda: tf.reduce_sum(logistic_noise([1010, 1000], seed.read_value())), jit_compile=jit)
        print(f"{name}: {median_ms(lambda: draw().numpy()):.2f} ms per step's noise")


if __name__ == "__main__":
    main()
