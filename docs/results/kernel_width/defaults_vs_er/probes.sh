#!/bin/bash
# Issue 33 item 5: one GCL argument changed from the constructor defaults at a time on the CIFAR-10 setup
# (validation), then the best (the sparse start) over seeds 1-2; one process at a time. The table in
# docs/gcl/extensions.md ("What moves the ConvNet's number on that short stream").
cd "$(dirname "$0")/../../../.."
R=docs/results/kernel_width/defaults_vs_er/run.py
for change in '{"regularize_below": null, "kernel_width": null}' '{"regularize_below": null}' \
              '{"kernel_width": null}' '{"kernel_start_edge": 0.001}' '{"kernel_start_edge": 0.01}' \
              '{"target_temperature": 1.0}' '{"context_lambda": 3.0}'; do
  python $R cifar_convnet gcl 0 "$change"
done
for seed in 1 2; do
  python $R cifar_convnet gcl $seed '{"kernel_start_edge": 0.001}'
done
