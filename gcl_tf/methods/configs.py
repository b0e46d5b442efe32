"""The methods' keys (a config's ``method`` section, the keywords of each method class): one
dataclass per method, each key once with its type, range, default and comment, and the rules
between keys. GCL's are in :mod:`gcl_tf.methods.gcl.config`.

This module imports no TensorFlow: the registry (:mod:`gcl_tf.methods`) imports it, so that a
command line checks a config's ``method`` section in well under a second. Each method class
names its own (``ER.Config``, ``self.settings``); a class derived from another keeps its
parent's unless it declares its own.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional

from gcl_tf.data.config import require_in_step_augmentation
from gcl_tf.errors import ConfigError
from gcl_tf.schema import MemoryMethodConfig, MethodConfig, value_range

MER_NO_AVERAGE = ("train.ema_momentum: mer writes its weights itself (MER Algorithm 1), past the optimizer that "
                  "would average them; allowed: null")


def check_replay_within_memory(config, section: str = "method") -> None:
    """A replay batch no larger than the memory it is drawn from (issue 71: 500 from a memory of 200
    was accepted silently)."""
    if config.replay_batch_size is not None and config.replay_batch_size > config.memory_size:
        nullable = [f.default for f in dataclasses.fields(config) if f.name == "replay_batch_size"] == [None]
        raise ConfigError(f"{section}.replay_batch_size: {config.replay_batch_size} is more than the "
                          f"{section}.memory_size {config.memory_size} samples a memory holds; allowed: at most "
                          f"{config.memory_size}" + (", or null (the training batch size)" if nullable else ""))


@dataclass
class FinetuneConfig(MethodConfig):
    name: str = "finetune"
    augments_in_step: ClassVar[bool] = True


@dataclass
class EWCConfig(MethodConfig):
    name: str = "ewc"
    # Penalty strength (the GCL paper's best: 10 on MNIST variants, 100 on the other benchmarks).
    ewc_lambda: float = field(default=10.0, metadata=value_range(0.0))
    # Samples of each finished task (its first ones in stream order) used to estimate the Fisher
    # (GEM's n_memories; 50 = the paper's 1000-sample budget over 20 tasks).
    fisher_samples: int = field(default=50, metadata=value_range(1))
    # squared_mean: square of the gradient of the mean loss (the GEM repository's code, which the
    # GCL paper ran and tuned ewc_lambda on); empirical: mean of squared per-sample gradients (the
    # EWC paper; far larger, so the paper's ewc_lambda makes SGD diverge after ~10 tasks).
    fisher: Literal["empirical", "squared_mean"] = "squared_mean"


@dataclass
class ICaRLConfig(MemoryMethodConfig):
    name: str = "icarl"  # memory_size: exemplars, split evenly across the exemplar sets seen so far
    # Exemplars replayed with each incoming batch (null: the training batch size).
    replay_batch_size: Optional[int] = field(default=None, metadata=value_range(1))

    def check_settings(self, section: str = "method"):
        check_replay_within_memory(self, section)


@dataclass
class GEMConfig(MemoryMethodConfig):
    name: str = "gem"
    supports_loss_scaling: ClassVar[bool] = False  # it projects its gradients itself
    # GEM's memory strength (the GCL paper's best: 0.5 on MNIST variants, 1.0 elsewhere).
    margin: float = field(default=0.5, metadata=value_range(0.0))


@dataclass
class AGEMConfig(MemoryMethodConfig):
    name: str = "agem"
    supports_loss_scaling: ClassVar[bool] = False  # it projects its gradients itself
    # Memory samples behind the reference gradient (the original's eps_mem_batch, 256).
    agem_batch_size: int = field(default=256, metadata=value_range(1))


@dataclass
class ERConfig(MemoryMethodConfig):
    name: str = "er"
    augments_in_step: ClassVar[bool] = True  # and the methods derived from it
    # Samples replayed from memory per step (null: the training batch size).
    replay_batch_size: Optional[int] = field(default=None, metadata=value_range(1))
    # What the network's BatchNorm layers normalise by at test time (our extension, as GCL's key: rule 27 of
    # docs/gcl/todays_batchnorm.md): moving, the moving averages of the training batches' statistics (the authors';
    # under augment: ocl those of augmented images); memory, those of one pass over the memory's stored images for
    # each evaluation (gcl_tf/batchnorm.py; no test image read). Test time only.
    test_batchnorm: Literal["moving", "memory"] = "moving"

    def check_settings(self, section: str = "method"):
        check_replay_within_memory(self, section)


@dataclass
class MERConfig(MemoryMethodConfig):
    name: str = "mer"  # memory_size: the reservoir memory (the original's --memories)
    supports_loss_scaling: ClassVar[bool] = False  # it moves the weights itself
    # Memory samples added to the incoming example in each batch (the original's --replay_batch_size).
    replay_batch_size: int = field(default=10, metadata=value_range(1))
    # Batches per incoming example, s (the original's --batches_per_example).
    batches_per_example: int = field(default=10, metadata=value_range(1))
    # Within-batch meta-learning rate (the GCL paper's best: 0.01).
    beta: float = field(default=0.01, metadata=value_range(0.0, lo_open=True))
    # Across-batch meta-learning rate (1.0 in all the original's MER Algorithm 1 runs).
    gamma: float = field(default=1.0, metadata=value_range(0.0, lo_open=True))

    def check_settings(self, section: str = "method"):
        check_replay_within_memory(self, section)

    def check(self, config):
        self.check_settings()
        if config.train.optimizer != "sgd":
            raise ConfigError(
                f"train.optimizer: mer uses plain SGD steps (MER Algorithm 1), got {config.train.optimizer!r}; "
                "allowed: sgd"
            )
        if config.train.ema_momentum is not None:
            raise ConfigError(MER_NO_AVERAGE)


@dataclass
class DERPPConfig(ERConfig):  # memory_size, replay_batch_size (ER's)
    name: str = "derpp"
    # Weight of the logit-matching term (the paper's Seq-CIFAR-10 value for a 200-sample buffer).
    alpha: float = field(default=0.1, metadata=value_range(0.0))
    # Weight of the replayed labels' cross-entropy (the same setting's).
    beta: float = field(default=0.5, metadata=value_range(0.0))
    # One run of the network over the incoming and replayed batches concatenated (as ER's step) instead
    # of the authors' one per batch: BatchNorm's moving statistics then match what the layers were
    # trained on. Under today's protocol (Split CIFAR10, ResNet-18, seed 0) the authors' way ends at
    # 23.86 ACC, and 44.75 once the same network's BatchNorm statistics are those of its memory
    # (docs/results/split_cifar10_ocl/bn_statistics.json). false: the authors'.
    one_pass: bool = False


@dataclass
class ERACEConfig(ERConfig):  # memory_size, replay_batch_size (ER's)
    name: str = "er_ace"
    # One run of the network over the incoming and replayed batches concatenated (as ER's step) instead
    # of the authors' one per batch: BatchNorm's moving statistics then match what the layers were
    # trained on. Under today's protocol (Split CIFAR10, ResNet-18, seed 0) the authors' way ends at
    # 48.46 ACC, and 56.24 once the same network's BatchNorm statistics are those of its memory
    # (docs/results/split_cifar10_ocl/bn_statistics.json). false: the authors'.
    one_pass: bool = False


@dataclass
class MIRConfig(ERConfig):  # memory_size, replay_batch_size (ER's)
    name: str = "mir"
    # Memory samples scored per step, the replay batch's candidates (the authors' subsample).
    candidates: int = field(default=50, metadata=value_range(1))


@dataclass
class OnProConfig(MemoryMethodConfig):
    name: str = "onpro"
    # it takes the protocol's augment, so that one config serves every method; its views follow ``views``
    augments_in_step: ClassVar[bool] = True
    # The views its contrasts and its CE see: its authors' transform (flip, grayscale 0.25, crop of area
    # 0.3-1), or the run's in-step augmentation (benchmark.augment: today's protocol's ocl set has colour jitter).
    views: Literal["authors", "protocol"] = "authors"
    # Memory samples drawn a step (buffer_batch_size); min(this, replay_per_class x classes seen) count.
    replay_batch_size: int = field(default=64, metadata=value_range(1))
    # Replayed samples per class seen (the authors' buffer_per_class).
    replay_per_class: int = field(default=7, metadata=value_range(1))
    # Temperature of OPE's prototype contrast (proto_t).
    proto_temperature: float = field(default=0.5, metadata=value_range(0.0, lo_open=True))
    # Temperature of the instance-wise contrast (ins_t).
    instance_temperature: float = field(default=0.07, metadata=value_range(0.0, lo_open=True))
    # APF: the share of the replay batch mixed at random; the rest mixes close classes (mixup_base_rate).
    mixup_base_rate: float = field(default=0.75, metadata=value_range(0.0, 1.0))
    # APF: the probability of a mixup (of the random share: per batch and per sample; per class pair).
    mixup_p: float = field(default=0.6, metadata=value_range(0.0, 1.0))
    # APF: the close classes' mixing weights are Beta(mixup_alpha, mixup_alpha).
    mixup_alpha: float = field(default=0.4, metadata=value_range(0.0, lo_open=True))
    # APF: the random share's mixing weights are uniform in [mixup_lower, mixup_upper]; the lower end.
    mixup_lower: float = field(default=0.0, metadata=value_range(0.0, 1.0))
    # APF: the upper end of the random share's mixing weights.
    mixup_upper: float = field(default=0.6, metadata=value_range(0.0, 1.0))
    # Rotated copies per image in the instance contrast (the authors' oop, 16; 4 or 1: cheaper, not theirs).
    rotations: Literal[1, 4, 16] = 16
    # Width of the projection head (the authors' 128); below the trunk's feature width.
    projection_size: int = field(default=128, metadata=value_range(1))
    # Scale of the instance similarities after the first task (the authors' CIFAR-10 value; 1 in the first task).
    sim_lambda: float = field(default=0.5, metadata=value_range(0.0, lo_open=True))
    # L2 weight decay, the authors' Adam weight_decay: weight_decay * w added to each weight's gradient.
    weight_decay: float = field(default=1e-4, metadata=value_range(0.0))

    def check_augmentation(self, augment: str, section: str = "method") -> None:
        """``views: protocol`` takes the run's in-step augmentation: a ConfigError without one."""
        if self.views == "protocol":
            require_in_step_augmentation(augment, f"{section}.views: protocol draws OnPro's views from the in-step "
                                         "augmentation", "views: authors")

    def check_settings(self, section: str = "method"):
        if self.mixup_lower > self.mixup_upper:
            raise ConfigError(f"{section}.mixup_lower: {self.mixup_lower} is above {section}.mixup_upper "
                              f"{self.mixup_upper}; allowed: a range with lower <= upper")

