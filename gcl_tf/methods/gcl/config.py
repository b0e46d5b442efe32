"""GCL's keys (a config's ``method`` section, the keywords of :class:`~gcl_tf.methods.gcl.model.GCL`),
their ranges and the paper's defaults, and the rules between them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional, Union

from gcl_tf.data.config import require_in_step_augmentation
from gcl_tf.errors import ConfigError
from gcl_tf.schema import MemoryMethodConfig, value_range


@dataclass
class Config(MemoryMethodConfig):
    name: str = "gcl"
    augments_in_step: ClassVar[bool] = True
    # Weight of the context cross-entropy (the target cross-entropy has weight 1).
    context_lambda: float = field(default=1.0, metadata=value_range(0.0))
    # Weight of the graph regulariser (paper: 50 on SVHN/CIFAR/MiniImageNet, 5000 Rotated MNIST).
    graph_lambda: float = field(default=50.0, metadata=value_range(0.0))
    # Weight of the vote's loss (our extension, docs/gcl/todays_rules.md rule 13): the cross-entropy of the
    # memory's label vote along the expected graph, for each valid context (the other contexts' vote)
    # and each incoming image, added as vote_lambda * (its targets' mean + its contexts' mean): the
    # graph is trained to carry the label itself, not only through the head. 0: the paper.
    vote_lambda: float = field(default=0.0, metadata=value_range(0.0))
    # Which classes an incoming image's vote is among in that loss (rule 14): all (rule 13), or
    # present, the incoming batch's classes only (ER-ACE's asymmetry, as target_loss: present): the
    # incoming images' neighbourhoods are not pushed from the old classes' images; the contexts' vote
    # stays among every class.
    vote_targets: Literal["all", "present"] = "all"
    # What the graph regulariser holds a context's current edges to (our extension, docs/gcl/todays_rules.md rule 18):
    # stored, the edges kept in the memory from when the context was last at its best loss (the paper); average, the
    # edges between the same augmented contexts as the weights' moving average sees them this step (a momentum
    # teacher, as MKD distills from; needs train.ema_momentum). Which contexts are held is the paper's rule either way.
    graph_target: Literal["stored", "average"] = "stored"
    # Distillation of the weights' moving average's predictions (our extension, docs/gcl/todays_rules.md rule 19;
    # MKD, Michel et al. ICML 2024): distill_lambda * T^2 KL(softmax(t / T) || softmax(s / T)), its mean over the
    # targets plus its mean over the valid contexts (as the cross-entropies), s the step's logits, t the average's
    # along its expected graph on the same augmented images (its trunk, heads and kernel; needs train.ema_momentum).
    # MKD's values: 5.5 and T 4.
    # 0: none (the paper).
    distill_lambda: float = field(default=0.0, metadata=value_range(0.0))
    distill_temperature: float = field(default=4.0, metadata=value_range(0.0, lo_open=True))
    # Which rows are distilled (rule 20): true, the targets and the contexts (rule 19); false, the contexts (the
    # memory's images) alone: the incoming images learn their classes from their cross-entropy only, which with
    # target_loss: present never weighs the old classes, so a teacher that does not know the new ones yet would
    # hold them down (rule 19 on seed 0: each task learned to 0-16% just after it).
    distill_targets: bool = True
    # What the distillation compares (rules 25, 26): head, the step's logits with the average's (MKD); own_gradient,
    # the same loss with its gradient through the head's own term alone (rule 25: it diverged on the today's
    # ResNet-18, 10.0 on validation seed 1; kept for that reading, not advised); own, the own term's logits with the
    # average's own term's (rule 26): the graph's term, a prior over the classes on a near-uniform graph that the
    # distillation turned against the newest classes (docs/gcl/todays_rules.md, rule 24's reading), is left to the
    # cross-entropies. own_gradient and own need own_latent.
    distill_part: Literal["head", "own_gradient", "own"] = "head"
    # The regulariser's cold start (our extension, docs/gcl.md): a context's stored edges are
    # held only once the context has been learned, i.e. its best context loss (cross-entropy,
    # nats) is below this value; until then its stored edges follow the current ones.
    # null: the paper (every context whose loss rose above its best is held).
    regularize_below: Optional[float] = field(default=1.0, metadata=value_range(0.0, lo_open=True))
    # The regulariser waits until the graph carries the label (our extension, docs/gcl_today.md): a
    # context's stored edges are held only when their vote for its label beats a graph weighing the
    # other contexts alike, p >= s ** regularize_selective (p: the share of its stored edge weight on
    # contexts of its class, s: the share of those contexts; 0.5: the vote's cross-entropy at most
    # half of chance's); until then they follow the current edges, which can learn the label.
    # null: no such wait (the paper).
    regularize_selective: Optional[float] = field(default=None, metadata=value_range(0.0, 1.0, lo_open=True))
    # What the RBF kernel compares (our extension, docs/gcl.md): rbf: the edge embeddings u as the
    # edge head gives them (the paper; their scale, and so the width that separates them, depends on
    # the trunk and drifts while it learns); normalized: u / ||u||, whose squared distances
    # 2 - 2 cos lie in [0, 4] with every trunk (kernel_width and the median start then apply to them).
    kernel: Literal["rbf", "normalized"] = "rbf"
    # The RBF kernel's initial width w = exp(s) in log k = -0.5 ||u_i - u_j||^2 / w (s is learned;
    # our extension, docs/gcl.md). The trunks differ in scale (an MLP's edge embeddings start ~10
    # apart, the ConvNet's ~200), so no constant width serves them all:
    # - median (the default): set at the first step with contexts where a pair of contexts at their
    #   median squared distance has edge kernel_start_edge; then learned;
    # - a number: that width, then learned (1.0: gcl_tf before issue 22, right for the MLP, no
    #   edges with the ConvNet);
    # - null: sqrt(hidden_size), as the authors initialise it (the paper's GCL; every edge near 1
    #   with the MLP).
    kernel_width: Optional[Union[float, Literal["median"]]] = field(default="median",
                                                                   metadata=value_range(0.0, lo_open=True))
    # With kernel_width: median, the edge probability a pair of contexts at their median squared
    # distance d^2 starts at: the width is d^2 / (-2 log kernel_start_edge). 0.1 learned with every
    # trunk and stream measured (docs/gcl.md); exp(-1/2) = 0.61: the plain median heuristic.
    kernel_start_edge: float = field(default=0.1, metadata=value_range(0.0, 1.0, lo_open=True, hi_open=True))
    # Relaxed-Bernoulli temperatures: context graph G (paper: 0.1 MNIST-like, 1 RGB) and
    # context-target graph A (paper: 5); test-time graphs (authors' code: 0.1).
    context_temperature: float = field(default=1.0, metadata=value_range(0.0, lo_open=True))
    target_temperature: float = field(default=5.0, metadata=value_range(0.0, lo_open=True))
    test_temperature: float = field(default=0.1, metadata=value_range(0.0, lo_open=True))
    # Graph samples averaged at test time (paper: 30).
    test_graph_samples: int = field(default=30, metadata=value_range(1))
    # Also evaluate with each of these numbers of test graph samples at every task end, in the
    # same run (results.json: evaluations.one_sample for 1, evaluations.<k>_samples otherwise):
    # the paper's ablation column "one test sample" needs no training of its own. []: none.
    also_test_graph_samples: list[int] = field(default_factory=list)
    # What a test image's class is read from (docs/gcl.md, "Prediction"): head (the paper): the
    # output head on the memory's values aggregated along test_graph_samples sampled test graphs;
    # vote (our extension): the memory's labels weighted by the expected test graph, p(y | x) =
    # sum_j sigmoid(E_xj) [y_j = y] / sum_j sigmoid(E_xj) (a kernel-weighted nearest-neighbour
    # vote over the memory; no head, no sampling); head_vote (our extension, docs/gcl/todays_rules.md
    # rule 10): the two log-probabilities summed; ncm (our extension, rule 11): the nearest of the
    # memory's class means of the L2-normalised ReLU(l), what the own head reads (SCR's classifier;
    # no graph, no sampling). Test time only: training is unchanged.
    test_prediction: Literal["head", "vote", "head_vote", "ncm"] = "head"
    # What the trunk's BatchNorm layers normalise by at test time (our extension, docs/gcl/todays_batchnorm.md rule 27):
    # moving, the moving averages of the training batches' statistics (the paper; under augment: ocl those of
    # augmented images, which test images are not); memory, those of one pass over the memory's stored images with
    # the weights evaluated (gcl_tf/batchnorm.py; no test image is read), for each evaluation, the moving ones given
    # back after. Test time only: training is unchanged.
    test_batchnorm: Literal["moving", "memory"] = "moving"
    # Also evaluate with each of these predictions at every task end, in the same run (results.json:
    # evaluations.<name>, e.g. evaluations.vote), as also_test_graph_samples does. []: none.
    also_test_predictions: list[Literal["head", "vote", "head_vote", "ncm"]] = field(default_factory=list)
    # The output head also reads each image's own latent embedding (our extension, docs/gcl.md):
    # logits = f_theta3(ReLU(Z)) + W_own ReLU(l), i.e. a linear head on [ReLU(Z), ReLU(l)]. A new
    # class is then learned from the batch directly, as ER's head learns it, not only once the
    # embeddings bring its images near the memory's few of it (a short stream's gap to ER).
    # false: the paper (the head reads ReLU(Z) only).
    own_latent: bool = True
    # The incoming batch's (the targets') cross-entropy (our extension, docs/gcl.md): present: over
    # the classes present in the incoming batch only (the whole batch across replicas), ER-ACE's
    # asymmetric cross-entropy (Caccia et al. 2022), so that a new class's images do not push the
    # old classes' logits down (with own_latent, the own head then does not forget as ER's does);
    # all: over every class (the paper). The contexts' cross-entropy stays over every class.
    target_loss: Literal["all", "present"] = "present"
    # Keys whose default changed, with the value they had before: a config or learner saved
    # before the change, which lacks the key, ran with that value, and reads back so.
    former_defaults: ClassVar[dict] = {"own_latent": False, "target_loss": "all"}
    # With an in-step augmentation (benchmark.augment: ocl; the targets, the incoming batch, are
    # always augmented): true augments the contexts, the memory's images, too (each step its own
    # draw, as the replay methods augment what they replay); false: the contexts as stored.
    augment_contexts: bool = True
    # Views of each incoming image in the step (our extension, docs/gcl_today.md rule 9): 2 sends a
    # second augmentation of the batch through the trunk beside the first, in the same pass as the
    # contexts (one set of BatchNorm statistics), each view a target of the graph A with the image's
    # label (OCM's and OnPro's two views; needs an in-step augmentation, benchmark.augment). The memory
    # stores the image once, with the first view's edges. 1: one view (the paper).
    target_views: Literal[1, 2] = 1
    # false: Bernoulli means sigmoid(logits) instead of sampled graphs (the paper's ablation).
    stochastic_graphs: bool = True
    # How the learned context graph is kept: the [M, M] matrix of edge logits (the paper), or
    # the M edge embeddings u it is recomputed from (linear memory, the paper's appendix).
    edge_memory: Literal["matrix", "embeddings"] = "matrix"
    # Attend to this many memory samples, drawn anew each step, instead of the whole memory, so
    # that a step's cost no longer grows with the memory (needs edge_memory: embeddings).
    # null: the whole memory (the paper).
    context_batch: Optional[int] = field(default=None, metadata=value_range(1))
    # The graph regulariser's mean over the held block of context pairs includes each held context's
    # pair with itself (the paper's p(G) is over every i, k in C; the authors average so). false: the
    # pairs i != k only (gcl_tf until issue 23; m / (m - 1) times the loss with m contexts held).
    regularize_self_pairs: bool = True
    # Compile the graph regulariser (its element-wise passes over the [k, k] context pairs, forward
    # and backward) with XLA into fused loops; false: plain TensorFlow ops (the same math, one
    # kernel per op, for platforms without XLA).
    fuse_regularizer: bool = True

    @property
    def draws_test_noise(self) -> bool:
        """Whether some evaluation averages sampled test graphs (the ``head`` with stochastic
        graphs, as the prediction or as a variant), so that test-time graph noise is drawn."""
        return any(self.samples_graphs(p) for p in (self.test_prediction, *self.also_test_predictions))

    def samples_graphs(self, prediction: str) -> bool:
        """Whether ``prediction`` averages sampled test graphs: the head (alone or with the vote) with
        stochastic graphs; the vote and ``ncm`` read the expected graph or none."""
        return self.stochastic_graphs and prediction in ("head", "head_vote")

    def check_augmentation(self, augment: str, section: str = "method") -> None:
        """A second view is a second draw of the run's in-step augmentation: a ConfigError without one."""
        if self.target_views > 1:
            require_in_step_augmentation(augment, f"{section}.target_views: {self.target_views} draws each view "
                                         "from the in-step augmentation", f"{section}.target_views: 1")

    def check(self, config) -> None:
        """The method's own rules and the run's: ``graph_target: average`` and ``distill_lambda`` need the
        weights' average."""
        super().check(config)
        if self.graph_target == "average" and config.train.ema_momentum is None:
            raise ConfigError("method.graph_target: average needs the weights' moving average; allowed: "
                              "train.ema_momentum set (e.g. 0.99), or method.graph_target: stored")
        if self.distill_lambda > 0 and config.train.ema_momentum is None:
            raise ConfigError(f"method.distill_lambda: {self.distill_lambda} needs the weights' moving average; "
                              "allowed: train.ema_momentum set (e.g. 0.99), or method.distill_lambda: 0")

    def check_settings(self, section: str = "method"):
        """The rules between the method's own keys (``section``: how errors name them)."""
        for k in self.also_test_graph_samples:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ConfigError(f"{section}.also_test_graph_samples: {k!r} is not allowed; "
                                  "allowed: a list of whole numbers of 1 or more")
        if self.distill_part != "head" and not self.own_latent:
            raise ConfigError(f"{section}.distill_part: {self.distill_part} needs {section}.own_latent: true (the "
                              "head's own term, which the distillation then trains alone); allowed: distill_part: head")
        if self.context_batch is not None:
            if self.edge_memory != "embeddings":
                raise ConfigError(
                    f"{section}.context_batch: needs {section}.edge_memory: embeddings (the matrix store needs "
                    "every new sample's edges to the whole memory); allowed: null with matrix"
                )
            if self.context_batch > self.memory_size:
                raise ConfigError(
                    f"{section}.context_batch: {self.context_batch} is more than {section}.memory_size "
                    f"{self.memory_size}; allowed: 1 .. {self.memory_size} or null"
                )
