#!/bin/bash
# Issue 52 item 6: every searched preset the configs adopted, against the paper's (or the preset
# before's) values, by the rule of gcl_tf/tune/adopt.py (docs/tuning/adopting.md).
# Resumable: a finished run is read, an interrupted one resumed. From the repository's root, with
# data/mnist.npz (docs/reproducing/mnist.md#real-mnist-without-tfds) and Debian's dataset-fashion-mnist.
set -eu
OUT=docs/results/search/adopt
MNIST="--set benchmark.source=npz --set benchmark.path=data/mnist.npz"
TO_FASHION="--second benchmark.source=idx --second benchmark.path=/usr/share/datasets/fashion-mnist"
TO_MNIST="--second benchmark.source=npz --second benchmark.path=data/mnist.npz"
OLD_GCL="--paper train.learning_rate=0.001 --paper method.graph_lambda=50 --paper method.context_lambda=1
  --paper method.context_temperature=0.1 --paper method.target_temperature=5 --paper method.test_temperature=0.1
  --paper method.kernel_width=1.0"
A="python -m gcl_tf.tune.adopt"
$A --config configs/permuted_mnist.yaml --method er --searched train.learning_rate=0.22313340622659925 --paper train.learning_rate=0.1 $MNIST $TO_FASHION --output $OUT/permuted_mnist-er
$A --config configs/permuted_mnist.yaml --method gcl $OLD_GCL --paper method.kernel_start_edge=0.1 $MNIST $TO_FASHION --output $OUT/permuted_mnist-gcl
$A --config configs/rotated_mnist.yaml --method gcl $OLD_GCL --paper method.kernel_start_edge=0.1 $MNIST $TO_FASHION --output $OUT/rotated_mnist-gcl
$A --config configs/permuted_fashion_mnist.yaml --method gcl $OLD_GCL $TO_MNIST --output $OUT/permuted_fashion_mnist-gcl
$A --config configs/rotated_fashion_mnist.yaml --method gcl $OLD_GCL $TO_MNIST --output $OUT/rotated_fashion_mnist-gcl
