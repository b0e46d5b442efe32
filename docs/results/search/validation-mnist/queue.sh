#!/bin/bash
# Issue 32's adoption rule (docs/gcl/searched_presets.md): each MNIST preset on validation
# (10% of each task's training data, all 20 tasks, the search's protocol) over seeds 0-2, one run at a
# time; a finished run is skipped. Run from the repository's root: bash docs/results/search/validation-mnist/queue.sh
set -u
OUT=docs/results/search/validation-mnist
for bench in permuted rotated; do
  for method in gcl er; do
    for seed in 0 1 2; do
      dir=$OUT/$bench-$method-preset-seed$seed
      [ -f "$dir/results.json" ] && continue
      resume=""; ls "$dir"/checkpoints/ckpt-*.index >/dev/null 2>&1 && resume="--resume"
      python -m gcl_tf.train --config configs/${bench}_mnist.yaml --set method.name=$method \
        --set benchmark.source=npz --set benchmark.path=data/mnist.npz \
        --set eval.split=validation --set benchmark.validation_fraction=0.1 --set seed=$seed \
        --output $dir $resume
    done
  done
done
# The rows of docs/gcl/searched_presets.md ran this at commit 27c45d6, before the presets
# changed: at a later commit it runs the presets of the day (each run's config.yaml says which).
