#!/bin/bash
# Issue 33 item 5: the sparse start (the probes' best) over seeds 1-2 as well, after probes2.sh.
cd "$(dirname "$0")/../../../.."
R=docs/results/kernel_width/defaults_vs_er/run.py
python $R cifar_convnet gcl 1 '{"kernel_start_edge": 0.001}'
python $R cifar_convnet gcl 2 '{"kernel_start_edge": 0.001}'
