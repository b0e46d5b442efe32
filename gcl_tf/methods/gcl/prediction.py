"""GCL's predictions: the test-time graphs from a batch to the memory, sampled and averaged
(``predict_log_probs``), the evaluation caches' handling (the test noise, the memory's
embeddings once per evaluation), and the artifacts the figures read (the expected context graph,
the penultimate features). Mixed into :class:`~gcl_tf.methods.gcl.model.GCL`."""
from __future__ import annotations

import sys
import types

import numpy as np
import tensorflow as tf

from gcl_tf import batchnorm, salts
from gcl_tf.data.streams import to_float
from gcl_tf.distribute import num_replicas, replica_id
from gcl_tf.memory import step_seed
from gcl_tf.methods.base import cross_entropy, mask_logits
from gcl_tf.methods.gcl.caches import TestNoiseCache
from gcl_tf.methods.gcl.graph import (
    average_log_probs,
    class_mean_logits,
    edge_logits,
    label_vote_logits,
    logistic_noise,
    neighbourhoods,
    regularized_contexts,
    relaxed_bernoulli,
)


def first_examples(dataset, count: int):
    """The first ``count`` images and labels of a stream of ``(images, labels, ...)`` batches (numpy)."""
    images, labels, seen = [], [], 0
    for batch in dataset:
        images.append(np.asarray(batch[0]))
        labels.append(np.asarray(batch[1]).reshape(-1))
        seen += len(labels[-1])
        if seen >= count:
            break
    if not labels:
        return np.zeros((0,)), np.zeros((0,), np.int64)
    return np.concatenate(images)[:count], np.concatenate(labels)[:count]


def map_parallel_iterations() -> int:
    """``tf.map_fn``'s parallel_iterations for the test graph samples: 4 in a graph (evaluation,
    predict, serving); 1 when executing eagerly (the task-end check), where iterations run one by
    one anyway and asking for more makes TensorFlow log a warning in every run."""
    return 1 if tf.executing_eagerly() else 4


class Prediction:
    """GCL's prediction and evaluation methods (a mixin: the model, memory, heads and caches are
    :class:`~gcl_tf.methods.gcl.model.GCL`'s)."""

    # -------------------------------------------------------------- evaluation caches
    def prepare_test_noise(self, eval_batch_size: int) -> None:
        """The test-time graph noise cache for test batches of ``eval_batch_size`` (see
        TestNoiseCache; one device only, and only when it fits TEST_NOISE_CACHE_BYTES)."""
        noise_shape = (self.settings.test_graph_samples, int(eval_batch_size), self.capacity)
        use_cache = (self.settings.draws_test_noise and TestNoiseCache.fits(noise_shape)
                     and tf.distribute.get_strategy().num_replicas_in_sync == 1)
        self._test_noise = TestNoiseCache(noise_shape) if use_cache else None

    def prepare_evaluation(self, x) -> None:
        unset = self.eval_batch_size is None
        super().prepare_evaluation(x)
        if unset and self.eval_batch_size is not None:
            self.prepare_test_noise(self.eval_batch_size)

    def evaluation_variants(self) -> dict:
        """``also_test_graph_samples``: the same evaluation with k test graph samples
        (``one_sample`` for 1, ``<k>_samples`` otherwise); ``also_test_predictions``: with each
        of those predictions (named as the prediction: ``vote``, ``head``)."""
        variants = {("one_sample" if k == 1 else f"{k}_samples"): {"test_graph_samples": k}
                    for k in self.settings.also_test_graph_samples}
        variants.update({name: {"test_prediction": name} for name in self.settings.also_test_predictions})
        return variants

    # -------------------------------------------------------------- prediction
    def memory_contexts(self):
        """What predictions attend to: the memory's edge embeddings [M, H] and the values
        :meth:`aggregate` reads [M, H + K + 1] (test-mode trunk on all M memory images)."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        return u_c, self.context_values(l_c, self.memory.labels, self.memory.filled())

    def test_statistics(self):
        """``test_batchnorm: memory``: the trunk's BatchNorm statistics from the filled memory's images
        (:func:`gcl_tf.batchnorm.statistics_of`, with the weights evaluated); else as they are."""
        return batchnorm.test_statistics(self.trunk, self.memory, self.settings.test_batchnorm)

    def on_evaluation_begin(self) -> None:
        if self._contexts is not None:
            self._contexts.open()

    def on_evaluation_end(self) -> None:
        if self._contexts is not None:
            self._contexts.close()

    def predict_log_probs(self, x, class_mask, samples=None, seed=None):
        """log p(y | x, memory) averaged over ``samples`` test-time graphs   [N, K].

        V (and the context embeddings) are computed once per call, not once per sample, and
        inside an evaluation scope once per scope (ContextCache).
        """
        return self.log_probs_of_test_graphs(*self.test_graphs(x, samples, seed), class_mask)

    @property
    def samples_test_graphs(self) -> bool:
        """Whether predictions average sampled test graphs (the paper's ``head`` with stochastic
        graphs), not the expected one (``stochastic_graphs: false``, or the ``vote``), nor ``ncm``
        (which reads no graph)."""
        return self.settings.samples_graphs(self.settings.test_prediction)

    def test_graphs(self, x, samples=None, seed=None):
        """What the test-time graphs from ``x`` to the memory are made of: the edge logits
        [N, M], the memory's values V, the logistic noise of the ``samples`` graphs [S, N, M]
        (None with the expected graph: deterministic graphs, the vote or ``ncm``) and the images'
        latent embeddings l [N, H] (the own head's input, and ``ncm``'s features)."""
        samples = self.settings.test_graph_samples if samples is None else samples
        if not self.samples_test_graphs:
            samples = 1
        # The caches serve the evaluation's own predictions; an explicit seed (serving) computes afresh.
        own = seed is None
        cached = own and self._test_noise is not None and (samples, x.shape[0]) == self._test_noise.shape[:2]
        if own:
            seed = step_seed(self.seed, self.step_counter, salts.TEST_GRAPH)
        if own and self._contexts is not None:
            u_c, values = self._contexts.get(self.memory_contexts)
        else:
            u_c, values = self.memory_contexts()
        u_t, l_t = self.embed(x, training=False)  # [N, H] each
        logits_e = edge_logits(u_t, u_c, self.kernel_log_scale)  # [N, M]
        replicas = num_replicas()
        if not self.samples_test_graphs:
            noise = None
        elif replicas == 1 and cached:
            noise = self._test_noise.get(seed)
        elif replicas == 1:
            noise = logistic_noise(tf.concat([[samples], tf.shape(logits_e)], 0), seed)  # as sample_graph draws it
        else:  # this replica's rows of the global batch's noise, as on one device
            n = x.shape[0]
            noise = logistic_noise([samples, replicas * n, self.capacity], seed)
            noise = tf.gather(noise, replica_id() * n + tf.range(n), axis=1)
        return logits_e, values, noise, l_t

    def log_probs_of_test_graphs(self, logits_e, values, noise, latents, class_mask):
        """log p(y | x, memory) averaged over the graphs of :meth:`test_graphs`   [N, K] (the
        ``vote``: the memory's labels along the expected graph, :func:`label_vote_logits`;
        ``head_vote``: the head's and the vote's log-probabilities summed, normalised again;
        ``ncm``: the nearest of the memory's class means of ReLU(l), :func:`class_mean_logits`).
        ``latents``: the images' l (None: the head without its own term)."""
        prediction = self.settings.test_prediction
        H, K = self.hidden_size, self.num_classes  # values: [l, one_hot(y), 1]
        if prediction == "ncm":
            logits = class_mean_logits(tf.nn.relu(latents), tf.nn.relu(values[:, :H]), values[:, H:H + K])
            return tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)
        if prediction != "head":
            logits = label_vote_logits(tf.sigmoid(logits_e), values[:, H:H + K])
            vote = tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)
            if prediction == "vote":
                return vote
        own = None if latents is None else self.own_logits(latents)
        head = self.head_log_probs(logits_e, values, noise, own, class_mask)
        return head if prediction == "head" else tf.nn.log_softmax(head + vote, axis=-1)

    def head_log_probs(self, logits_e, values, noise, own, class_mask):
        """The head's log p(y | x, memory), averaged over the sampled test graphs (``noise``), or
        on the expected graph (None)   [N, K]."""
        if noise is None:
            logits = self.classify(tf.sigmoid(logits_e)[None], values, own)  # [1, N, K]
        else:  # one graph sample at a time: its [N, M] graph stays in cache through the GEMM
            temperature = self.settings.test_temperature
            logits = tf.map_fn(lambda eps: self.classify(relaxed_bernoulli(logits_e, temperature, eps),
                                                         values, own),
                               noise, parallel_iterations=map_parallel_iterations(),
                               fn_output_signature=tf.float32)  # [S, N, K]
        log_probs = tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)
        return average_log_probs(log_probs)

    # -------------------------------------------------------------- a task it does not learn
    CHECK_IMAGES = 200  # of each task's stream, read at its end until a warning is given
    ABOVE_CHANCE = 10.0  # points: a task classified below chance + this is reported
    UNIFORM_SPREAD = 0.8  # rows whose edges weigh this share of the memory alike see only its average

    def accuracy_and_test_graph(self, images, labels):
        """Accuracy (%) of GCL's predictions on ``images`` [N, ...] with ``labels`` [N] (as
        evaluated: test graphs sampled, every class allowed), and the first of those test graphs,
        from the images to the filled memory slots   (float, [N, C] numpy). A sample, not the
        expected graph: at a low test temperature an edge of probability 1e-5 samples to about 0."""
        accuracy, sampled, _ = self.accuracy_and_test_graphs(images, labels)
        return accuracy, sampled

    def accuracy_and_test_graphs(self, images, labels, classes=None):
        """:meth:`accuracy_and_test_graph` and the expected test graph, ``sigmoid(E)`` from the
        images to the filled memory slots   (float, [N, C], [N, C] numpy); the accuracy among
        ``classes`` only, if given (default: every class). Runs on the device of the model's
        variables (the first replica's under a strategy), within an evaluation scope: the weights and
        BatchNorm statistics an evaluation uses (``train.ema_momentum``, ``test_batchnorm``)."""
        allowed = np.ones(self.num_classes, bool) if classes is None else np.isin(np.arange(self.num_classes), classes)
        with tf.device(self.kernel_log_scale.value.device), self.evaluation_scope():
            logits_e, values, noise, own = self.test_graphs(to_float(images))
            log_probs = self.log_probs_of_test_graphs(logits_e, values, noise, own, allowed)
            predicted = tf.argmax(log_probs, axis=-1, output_type=tf.int32).numpy()
            expected = tf.sigmoid(logits_e)
            graph = expected if noise is None else relaxed_bernoulli(logits_e, self.settings.test_temperature, noise[0])
        filled = int(self.memory.num_filled.numpy())
        return (100.0 * float((predicted == labels).mean()), graph[:, :filled].numpy(),
                expected[:, :filled].numpy())

    def learning_warning(self, task_index, images, labels):
        """One line when the task just learned is classified at about chance among its own classes
        (below chance + ABOVE_CHANCE points, on ``images`` of its stream) because of the kernel: the
        images have almost no edge to the memory (a width too narrow for the trunk's embeddings), or their
        edges weigh the whole memory alike (too wide); else None. (Small edge probabilities alone
        are no fault: normalised, a row of edges all below 0.01 still singles out its nearest
        neighbours, and the sparse starts the searches of docs/tuning.md found learn well. Nor is a
        task told apart among its own classes but taken for old ones: it was learned, and no kernel
        setting mends that.)"""
        classes = np.unique(labels)
        if len(classes) < 2 or int(self.memory.num_filled.numpy()) < 2:
            return None  # no chance level to compare with, or no graph yet
        accuracy, sampled, expected = self.accuracy_and_test_graphs(images, labels, classes)
        chance = 100.0 / len(classes)
        if accuracy >= chance + self.ABOVE_CHANCE:
            return None
        no_edge, _ = neighbourhoods(sampled)
        _, spread = neighbourhoods(expected)
        if no_edge >= 0.5:
            why, change = f"{100 * no_edge:.0f}% of them have almost no edge to the memory", "larger"
        elif spread >= self.UNIFORM_SPREAD:
            why, change = f"their edges weigh {100 * spread:.0f}% of the memory alike, so each sees only its average", \
                "smaller"
        else:
            return None  # the kernel is not what keeps it from learning this task
        width = float(tf.exp(self.kernel_log_scale).numpy())
        held = self.held_fraction() if self.settings.graph_lambda > 0 and change == "smaller" else 0.0
        if held >= self.HELD_SHARE:  # the regulariser keeps the graph as it was stored: docs/gcl_today.md
            why += (f"; the graph regulariser holds {100 * held:.0f}% of the memory's contexts to edges "
                    "stored before they were learned")
            advice = "try method.graph_lambda: 0 (GCL's graph regulariser off)"
        elif self.width_from_median:
            advice = (f"try a {change} method.kernel_start_edge (GCL's kernel_start_edge, now "
                      f"{self.settings.kernel_start_edge:g})")
        else:
            advice = "try method.kernel_width: median (GCL's kernel_width, the default)"
        return (f"warning: {self.name}: after task {int(task_index) + 1} it classifies {accuracy:.0f}% of that task's "
                f"training images right among its {len(classes)} classes (chance: {chance:.0f}%): {why} "
                f"(kernel width {width:.3g} for this trunk's embeddings); {advice} and compare on validation")

    HELD_SHARE = 0.05  # a regulariser holding this share of the contexts is named as the cause (a tenth of
    # them, held at graph_lambda 50, kept the ResNet-18 at chance: docs/gcl_today.md)

    def held_fraction(self) -> float:
        """The share of the filled memory's contexts the graph regulariser would hold now: those
        whose loss (test mode, along the expected context graph without self-edges) is above
        their best loss (under ``regularize_below``: and whose best is below it), as the training
        step's ``regularized_fraction`` reads it with sampled graphs and augmented contexts."""
        filled = int(self.memory.num_filled.numpy())
        u, values = self.memory_contexts()
        u, values = u[:filled], values[:filled]
        graph = tf.sigmoid(edge_logits(u, u, self.kernel_log_scale)) * (1.0 - tf.eye(filled))
        logits = self.classify(graph, values, self.own_logits(values[:, :self.hidden_size]))  # V = [l, y, 1]
        current = cross_entropy(self.memory.labels[:filled], logits)
        every = tf.ones([filled], tf.bool)
        stored = self.stored_edge_logits(tf.range(filled))[:filled, :filled]  # (the whole matrix when it is one)
        held = regularized_contexts(every, self.memory.best_loss[:filled], current, self.settings.regularize_below,
                                    self.carrying_label(stored, tf.range(filled), every))
        return float(tf.reduce_mean(tf.cast(held, tf.float32)).numpy())

    def on_task_end(self, task_index, dataset) -> None:
        super().on_task_end(task_index, dataset)
        if dataset is None or self._warned_of_task is not None:
            return  # one warning per model: the first task it does not learn
        images, labels = first_examples(dataset, self.CHECK_IMAGES)
        line = self.learning_warning(task_index, images, labels) if len(labels) else None
        if line is not None:
            self._warned_of_task = int(task_index)
            print(line, file=sys.stderr, flush=True)

    # -------------------------------------------------------------- artifacts for the figures
    def context_graph(self):
        """The expected context graph ``sigmoid(E)`` between the filled memory slots, self-edges
        removed, and the slots' labels: ``(graph [C, C], labels [C])`` as numpy (None if empty)."""
        import numpy as np

        filled = int(self.memory.num_filled.numpy())
        if filled == 0:
            return None
        chunk = self.eval_batch_size or 500
        u = tf.concat([self.embed(self.memory.images[i:min(i + chunk, filled)], training=False)[0]
                       for i in range(0, filled, chunk)], axis=0)  # [C, H]
        graph = tf.sigmoid(edge_logits(u, u, self.kernel_log_scale)).numpy()  # [C, C]
        np.fill_diagonal(graph, 0.0)
        return graph, self.memory.labels[:filled].numpy()

    def penultimate(self, x):
        """ReLU(Z), what the output head reads, with the expected test graph (Bernoulli means,
        row-normalised) from ``x`` to the memory   [N, 2H] (with ``own_latent`` [ReLU(Z),
        ReLU(l)] [N, 3H], all the head reads)."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        u_t, l_t = self.embed(x, training=False)  # [N, H]
        graph = tf.sigmoid(edge_logits(u_t, u_c, self.kernel_log_scale))  # [N, M]
        z = tf.nn.relu(self.aggregate(graph, self.context_values(l_c, self.memory.labels, self.memory.filled())))
        return z if self.own_head is None else tf.concat([z, tf.nn.relu(l_t)], axis=-1)

    def output_layer(self):
        """The linear layer on :meth:`penultimate`: the output head, or with ``own_latent`` its
        kernel stacked on the own head's ([3H, K]; the bias is the output head's)."""
        if self.own_head is None:
            return self.output_head
        return types.SimpleNamespace(kernel=tf.concat([self.output_head.kernel, self.own_head.kernel], axis=0),
                                     bias=self.output_head.bias)
