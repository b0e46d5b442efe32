#!/bin/bash
# Issue 33 item 5, probes on the CIFAR-10 setup (validation): which of the defaults' departures from the
# Split CIFAR10 preset (regularize_below 1, kernel_width median) costs GCL the new tasks. One process at a time.
cd "$(dirname "$0")/../../../.."
R=docs/results/kernel_width/defaults_vs_er/run.py
python $R cifar_convnet gcl 0 '{"regularize_below": null, "kernel_width": null}'
python $R cifar_convnet gcl 0 '{"regularize_below": null}'
python $R cifar_convnet gcl 0 '{"kernel_width": null}'
