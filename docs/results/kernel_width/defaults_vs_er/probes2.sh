#!/bin/bash
# Issue 33 item 5, more probes on the CIFAR-10 setup (validation), after probes.sh: a sparse start
# (the ConvNet's best on the 5 x 2000 stream, docs/gcl.md), the context loss's weight, the target temperature.
cd "$(dirname "$0")/../../../.."
R=docs/results/kernel_width/defaults_vs_er/run.py
python $R cifar_convnet gcl 0 '{"kernel_start_edge": 0.001}'
python $R cifar_convnet gcl 0 '{"kernel_start_edge": 0.01}'
python $R cifar_convnet gcl 0 '{"target_temperature": 1.0}'
python $R cifar_convnet gcl 0 '{"context_lambda": 3.0}'
