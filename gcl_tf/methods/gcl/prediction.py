"""GCL's predictions: the test-time graphs from a batch to the memory, sampled and averaged
(``predict_log_probs``), the evaluation caches' handling (the test noise, the memory's
embeddings once per evaluation), and the artifacts the figures read (the expected context graph,
the penultimate features). Mixed into :class:`~gcl_tf.methods.gcl.model.GCL`."""
from __future__ import annotations

import sys

import tensorflow as tf

from gcl_tf.distribute import num_replicas, replica_id
from gcl_tf.memory import step_seed
from gcl_tf.methods.base import mask_logits
from gcl_tf.methods.gcl.caches import TestNoiseCache
from gcl_tf.methods.gcl.graph import average_log_probs, degenerate_edges, edge_logits, logistic_noise, relaxed_bernoulli

SALT_TEST_GRAPH = 202


class Prediction:
    """GCL's prediction and evaluation methods (a mixin: the model, memory, heads and caches are
    :class:`~gcl_tf.methods.gcl.model.GCL`'s)."""

    # -------------------------------------------------------------- evaluation caches
    def prepare_test_noise(self, eval_batch_size: int) -> None:
        """The test-time graph noise cache for test batches of ``eval_batch_size`` (see
        TestNoiseCache; one device only, and only when it fits TEST_NOISE_CACHE_BYTES)."""
        noise_shape = (self.test_graph_samples, int(eval_batch_size), self.capacity)
        use_cache = (self.stochastic_graphs and TestNoiseCache.fits(noise_shape)
                     and tf.distribute.get_strategy().num_replicas_in_sync == 1)
        self._test_noise = TestNoiseCache(noise_shape) if use_cache else None

    def prepare_evaluation(self, x) -> None:
        unset = self.eval_batch_size is None
        super().prepare_evaluation(x)
        if unset and self.eval_batch_size is not None:
            self.prepare_test_noise(self.eval_batch_size)

    def evaluation_variants(self) -> dict:
        """``also_test_graph_samples``: the same evaluation with k test graph samples
        (``one_sample`` for 1, ``<k>_samples`` otherwise)."""
        return {("one_sample" if k == 1 else f"{k}_samples"): {"test_graph_samples": k}
                for k in self.also_test_graph_samples}

    # -------------------------------------------------------------- prediction
    def memory_contexts(self):
        """What predictions attend to: the memory's edge embeddings [M, H] and the values
        :meth:`aggregate` reads [M, H + K + 1] (test-mode trunk on all M memory images)."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        return u_c, self.context_values(l_c, self.memory.labels, self.memory.filled())

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
        samples = self.test_graph_samples if samples is None else samples
        if not self.stochastic_graphs:
            samples = 1
        # The caches serve the evaluation's own predictions; an explicit seed (serving) computes afresh.
        own = seed is None
        cached = own and self._test_noise is not None and (samples, x.shape[0]) == self._test_noise.shape[:2]
        if own:
            seed = step_seed(self.seed, self.step_counter, SALT_TEST_GRAPH)
        if own and self._contexts is not None:
            u_c, values = self._contexts.get(self.memory_contexts)
        else:
            u_c, values = self.memory_contexts()
        u_t, _ = self.embed(x, training=False)  # [N, H]
        logits_e = edge_logits(u_t, u_c, self.kernel_log_scale)  # [N, M]
        replicas = num_replicas()
        if not self.stochastic_graphs:
            noise = None
        elif replicas == 1 and cached:
            noise = self._test_noise.get(seed)
        elif replicas == 1:
            noise = logistic_noise(tf.concat([[samples], tf.shape(logits_e)], 0), seed)  # as sample_graph draws it
        else:  # this replica's rows of the global batch's noise, as on one device
            n = x.shape[0]
            noise = logistic_noise([samples, replicas * n, self.capacity], seed)
            noise = tf.gather(noise, replica_id() * n + tf.range(n), axis=1)
        if noise is None:
            logits = self.classify(tf.sigmoid(logits_e)[None], values)  # [1, N, K]
        else:  # one graph sample at a time: its [N, M] graph stays in cache through the GEMM
            logits = tf.map_fn(lambda eps: self.classify(relaxed_bernoulli(logits_e, self.test_temperature, eps),
                                                         values),
                               noise, parallel_iterations=4, fn_output_signature=tf.float32)  # [S, N, K]
        log_probs = tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)
        return average_log_probs(log_probs)

    # -------------------------------------------------------------- a graph that cannot learn
    DEGENERATE_SHARE = 0.99  # of the edges near 0 (or near 1) for the first task's warning

    def graph_warning(self):
        """One line when the learned context graph is degenerate (nearly every edge probability
        below 0.01, or above 0.99: the kernel's width does not suit the trunk's embeddings and
        GCL stays near chance), else None."""
        found = self.context_graph()
        if found is None or found[0].shape[0] < 2:
            return None
        near_0, near_1 = degenerate_edges(found[0])
        if max(near_0, near_1) < self.DEGENERATE_SHARE:
            return None
        side, share = ("above 0.99", near_1) if near_1 >= near_0 else ("below 0.01", near_0)
        width = float(tf.exp(self.kernel_log_scale).numpy())
        if self.width_from_median:  # sparser when all edges are on, denser when off
            advice = "try a {} method.kernel_start_edge (GCL's kernel_start_edge, now {:g})".format(
                "smaller" if side == "above 0.99" else "larger", self.kernel_start_edge)
        else:
            advice = "try method.kernel_width: median (GCL's kernel_width, the default)"
        return (f"warning: {self.name}: after its first task {100 * share:.1f}% of the context graph's edge "
                f"probabilities are {side} (kernel width {width:.3g} for this trunk's embeddings), so GCL "
                f"predicts about as well as chance; "
                f"{advice} and compare on validation")

    def on_task_end(self, task_index, dataset) -> None:
        super().on_task_end(task_index, dataset)
        if int(task_index) == 0:  # the learner's first task: say so if its graph cannot learn
            line = self.graph_warning()
            if line is not None:
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
        row-normalised) from ``x`` to the memory   [N, 2H]."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        u_t, _ = self.embed(x, training=False)  # [N, H]
        graph = tf.sigmoid(edge_logits(u_t, u_c, self.kernel_log_scale))  # [N, M]
        return tf.nn.relu(self.aggregate(graph, self.context_values(l_c, self.memory.labels, self.memory.filled())))

    def output_layer(self):
        return self.output_head
