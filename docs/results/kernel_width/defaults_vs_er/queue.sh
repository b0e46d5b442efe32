#!/bin/bash
# Issue 33 item 5: the measurement table, one TF process at a time (validation, 20% of each task held out).
cd /work/main
R=docs/results/kernel_width/defaults_vs_er/run.py
for s in 0 1 2; do
  python $R digits_cnn gcl $s
  python $R digits_cnn gcl $s '{"kernel":"normalized"}'
  python $R digits_cnn er $s
done
python $R cifar_convnet er 1
python $R cifar_convnet er 2
python $R cifar_convnet gcl 1 '{"kernel":"normalized"}'
python $R cifar_convnet gcl 1
python $R cifar_convnet gcl 2 '{"kernel":"normalized"}'
python $R cifar_convnet gcl 2
