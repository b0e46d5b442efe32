"""GCL's training step, in the named parts of docs/gcl.md ("The step", "Loss", "Memory update after
each step"), a mixin of :class:`~gcl_tf.methods.gcl.model.GCL`.

:meth:`Training.learn` is the whole online update:

1. :meth:`~Training.select_contexts`: the memory slots attended to (C of docs/gcl.md);
2. :meth:`~Training.training_forward`, under the tape: the embeddings u and l of contexts and
   targets, the log kernel (:meth:`~Training.log_kernel`), the edge logits E and one relaxed
   Bernoulli graph (:meth:`~Training.sample_training_graph`), the logits along it
   (:meth:`~Training.graph_logits`), the cross-entropies (:meth:`~Training.cross_entropies`) and
   the graph regulariser L_G over the held contexts (:meth:`~Training.graph_regularization`) and,
   with a teacher (``graph_target: average``, ``distill_lambda``), what the weights' moving average
   answers on the same images (:meth:`~Training.teacher`);
3. the optimizer's update, skipped whole while no context is valid (the first batch);
4. the edges the memory keeps (:meth:`~Training.stored_edges`: over all replicas' targets under a
   strategy), the kernel width from the median once (:meth:`~Training.set_width_from_median`), and
   the memory's update (:meth:`~Training.update_memory`: best losses, reservoir insertion, edges).

Shapes: ``k`` contexts, ``T`` targets per batch, ``H`` hidden size, ``K`` classes.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.distribute import all_gather, all_mean, gather_in_order, num_replicas, replica_id
from gcl_tf.errors import ConfigError
from gcl_tf.memory import sample_without_replacement, scatter_update, step_seed
from gcl_tf.methods.base import cross_entropy, mask_logits, present_classes
from gcl_tf.methods.gcl.graph import (
    context_graph_regularizer,
    context_graph_regularizer_fused,
    edge_logits,
    expected_graph,
    kernel_factors,
    label_carrying_contexts,
    logistic_noise,
    logit_of_exp,
    median_kernel_width,
    median_squared_distance,
    normalize_rows,
    regularized_contexts,
    replaced_source_index,
    replica_noise_rows,
    sampled_graph,
    update_edge_memory,
    vote_cross_entropy,
)
from gcl_tf.optimizers import average_of, averaged_weights, averaging_optimizer, distillation_loss


class Edges(NamedTuple):
    """What a step's forward pass gives the memory's update (no gradient flows back from it)."""

    embeddings: tf.Tensor  # u [k + T, H], contexts first
    kernel_log_scale: tf.Tensor  # s as the forward pass read it (before the update)
    to_contexts: tf.Tensor  # edge logits E [k + T, k]
    to_targets: tf.Tensor  # edge logits [k + T, T] (a new sample's edges to the others)
    context_ce: tf.Tensor  # c_i [k], each context's cross-entropy
    regularized: tf.Tensor  # m_i [k] bool, the contexts held by L_G


class Teacher(NamedTuple):
    """What the weights' moving average answers on a step's own images (:meth:`Training.teacher`; no gradient)."""

    context_edges: tf.Tensor  # [k, k] its edge logits between the contexts (graph_target: average)
    logits: Optional[tf.Tensor]  # [k + T, K] its logits along its expected graph (distill_lambda), else None


class Forward(NamedTuple):
    """:meth:`Training.training_forward`'s answer: the terms to log, this replica's share of the loss, the edges."""

    logs: dict  # loss, target_loss, context_loss, graph_loss, regularized_fraction
    replica_loss: tf.Tensor
    edges: Edges


class Training:
    """GCL's training step (see the module docstring)."""

    # -------------------------------------------------------------- the contexts
    def select_contexts(self):
        """The memory slots attended to this step, ``(slots [k] int32, valid [k] bool)``: the whole memory
        (k = M, valid = filled), or ``context_batch`` filled slots drawn uniformly without replacement, valid first."""
        filled = self.memory.filled()
        if self.num_contexts == self.capacity:
            return tf.range(self.capacity, dtype=tf.int32), filled
        seed = step_seed(self.seed, self.step_counter, salts.CONTEXT_BATCH)
        return sample_without_replacement(filled, self.num_contexts, seed)

    # -------------------------------------------------------------- the graph (docs/gcl.md, steps 3-6)
    def log_kernel(self, u, k: int):
        """The RBF kernel's factors and its log between every image and the contexts:
        ``(rows [k + T, H + 2], target columns [T, H + 2], log k [k + T, k])`` (rows: contexts
        (G), then targets (A); the target columns give the targets' own edges, for the memory)."""
        rows, cols = kernel_factors(u, self.kernel_log_scale)  # [k + T, H + 2] each
        context_cols, target_cols = tf.split(cols, [k, u.shape[0] - k])  # (splits: their gradient is one concat)
        return rows, target_cols, tf.matmul(rows, context_cols, transpose_b=True)  # [k + T, k]: G then A

    def training_noise(self, k, T, seed):
        """The logistic noise of one training graph [k + T, k] (T: the targets, every view's). On R replicas
        it is drawn for the global batch (k + R T rows) and each replica takes the rows of its own targets
        (:func:`replica_noise_rows`): the graphs of a single-device run, sliced."""
        replicas = num_replicas()
        noise = logistic_noise([k + replicas * T, k], seed)  # [k + R T, k]
        if replicas > 1:
            views = self.settings.target_views
            noise = tf.gather(noise, replica_noise_rows(k, T // views, views, replicas, replica_id()))
        return noise

    def sample_training_graph(self, log_k, seed):
        """Edge logits E and one relaxed-Bernoulli sample of the raw training graph, from the log
        kernel [k + T, k] (rows: contexts (G), then targets (A)), with the context and target
        temperatures: ``(E, graph)`` [k + T, k], the contexts' self-edges removed, not masked,
        not normalised."""
        k, T = log_k.shape[1], log_k.shape[0] - log_k.shape[1]
        if not self.settings.stochastic_graphs:
            return expected_graph(log_k)
        s = self.settings
        inverse_temperature = tf.concat([tf.fill([k, 1], 1.0 / s.context_temperature),
                                         tf.fill([T, 1], 1.0 / s.target_temperature)], axis=0)  # [k + T, 1]
        return sampled_graph(log_k, self.training_noise(k, T, seed), inverse_temperature)

    def training_graph(self, log_k, valid, seed):
        """The sampled training graph as the paper writes it: self-edges of contexts and invalid contexts removed,
        rows normalised [k + T, k] (the step aggregates the sample and normalises after the GEMM: the same Z)."""
        return normalize_rows(self.sample_training_graph(log_k, seed)[1], valid[None, :])

    def stored_edge_logits(self, slots):
        """The stored context-graph logits between the context slots [k, k] (no gradient)."""
        memory = self.memory
        if memory.edge_memory == "matrix":
            if self.num_contexts == self.capacity:
                return memory.edge_logits.read_value()
            return tf.gather(tf.gather(memory.edge_logits, slots), slots, axis=1)
        stored = tf.gather(memory.edge_embeddings, slots)  # [k, H]
        return tf.stop_gradient(edge_logits(stored, stored, self.kernel_log_scale))

    # -------------------------------------------------------------- the loss (docs/gcl.md, steps 7-8, "Loss")
    def graph_logits(self, graph, latents, context_labels, valid, k: int, own=None):
        """Logits of the contexts [k, K] and of the targets [T, K]: Z = normalised graph @ V, then the output
        head on ReLU(Z) (plus the own head's term with ``own_latent``: ``own``, or computed when None)."""
        values = self.context_values(tf.split(latents, [k, latents.shape[0] - k])[0], context_labels, valid)
        out = self.classify(graph, values, self.own_logits(latents) if own is None else own)  # [k + T, K]
        return tf.split(out, [k, latents.shape[0] - k])

    def cross_entropies(self, context_out, target_out, context_labels, y, valid, present):
        """``(c [k], L_C, L_T, valid contexts)``: each context's cross-entropy, their mean over the
        valid contexts and the targets' mean (over the classes ``present``, with ``target_loss:
        present``: ER-ACE's asymmetric cross-entropy for the incoming batch)."""
        context_ce = cross_entropy(context_labels, context_out)  # [k]
        if self.settings.target_loss == "present":  # ER-ACE's asymmetric cross-entropy for the incoming batch
            present = present_classes(y, self.num_classes) if present is None else present
            target_out = mask_logits(target_out, present)
        target_ce = cross_entropy(y, target_out)  # [T]
        valid_f = tf.cast(valid, tf.float32)
        num_valid = tf.maximum(tf.reduce_sum(valid_f), 1.0)
        context_loss = tf.reduce_sum(context_ce * valid_f) / num_valid
        return context_ce, context_loss, tf.reduce_mean(target_ce), num_valid

    def vote_loss(self, logits_e, context_labels, y, valid, k: int, present=None):
        """The vote's loss (``vote_lambda``): the mean cross-entropy of the memory's label vote along
        the expected graph over the targets (with ``vote_targets: present`` among the classes
        ``present``, as ``target_loss``), plus its mean over the valid contexts (among every class)."""
        valid_f = tf.cast(valid, tf.float32)
        one_hot = tf.one_hot(context_labels, self.num_classes) * valid_f[:, None]
        mask = None
        if self.settings.vote_targets == "present":
            present = present_classes(y, self.num_classes) if present is None else present
            mask = tf.concat([tf.ones([k, self.num_classes], tf.bool),
                              tf.broadcast_to(present[None, :], [y.shape[0], self.num_classes])], axis=0)
        context_ce, target_ce = tf.split(vote_cross_entropy(logits_e, one_hot, tf.concat([context_labels, y], 0), mask),
                                         [k, y.shape[0]])
        return tf.reduce_mean(target_ce) + tf.reduce_sum(context_ce * valid_f) / tf.maximum(tf.reduce_sum(valid_f), 1.0)

    def graph_regularization(self, logits_e, slots, valid, context_ce, teacher: Optional[Teacher] = None):
        """``(m [k], L_G)``: the contexts held (their loss rose above their best, under
        ``regularize_below``) and the graph regulariser between their current edges and the stored
        ones (``graph_target: average``: the ``teacher``'s, the weights' average's on this step's images)."""
        best = tf.gather(self.memory.best_loss, slots)
        stored = self.stored_edge_logits(slots) if self.reads_stored_edges else None
        regularized = regularized_contexts(valid, best, tf.stop_gradient(context_ce), self.settings.regularize_below,
                                           self.carrying_label(stored, slots, valid))  # m_i
        if self.settings.graph_target == "average":
            stored = teacher.context_edges
        regularizer = context_graph_regularizer_fused if self.settings.fuse_regularizer else context_graph_regularizer
        return regularized, regularizer(logits_e, stored, regularized, self.settings.regularize_self_pairs)

    @property
    def reads_stored_edges(self) -> bool:
        """Whether a step reads the stored edges: as the regulariser's target, or for the wait of
        ``regularize_selective`` (with ``graph_target: average`` and no wait, they are not computed)."""
        return self.settings.graph_target == "stored" or self.settings.regularize_selective is not None

    def average_edge_logits(self, images, k: int):
        """The edge logits between the first ``k`` of ``images`` (the contexts) [k, k] as the weights'
        moving average sees them: its trunk in training mode on the step's whole batch (BatchNorm
        over the same images as the learner's pass, its statistics' updates dropped), its edge head
        and kernel width. No gradient."""
        images = images[:k] if self._per_image_trunk else images  # (no BatchNorm: the contexts alone suffice)
        with averaged_weights(self, self.teacher_optimizer()):
            u = self.edge_embeddings(self.trunk(images, training=True)[:k])
            return tf.stop_gradient(edge_logits(u, u, self.kernel_log_scale))

    def teacher_optimizer(self):
        """The optimizer that keeps the weights' average a teacher reads; a ConfigError without one."""
        optimizer = averaging_optimizer(self.optimizer)
        if optimizer is None:
            key, other = (("method.graph_target: average", "graph_target: stored")
                          if self.settings.graph_target == "average" else
                          (f"method.distill_lambda: {self.settings.distill_lambda}", "distill_lambda: 0"))
            raise ConfigError(f"{key} needs the weights' moving average; allowed: an optimizer with use_ema=True "
                              f"(train.ema_momentum), or {other}")
        return optimizer

    def teacher(self, contexts, targets, context_labels, valid) -> Optional[Teacher]:
        """What the weights' moving average answers on the step's own (augmented) contexts and targets,
        its trunk in training mode on the same batch (BatchNorm over the same images, its statistics'
        updates dropped): the edges between the contexts (``graph_target: average``) and, with
        ``distill_lambda``, its logits of every row along its expected graph, the labels it would
        give them (MKD's teacher, distilled). None when no key reads it. No gradient."""
        s = self.settings
        k = contexts.shape[0]
        if s.distill_lambda == 0:
            if s.graph_target != "average":
                return None
            return Teacher(self.average_edge_logits(tf.concat([contexts, targets], axis=0), k), None)
        with averaged_weights(self, self.teacher_optimizer()):
            u, latents = self.embed_step(contexts, targets)
            logits_e, graph = expected_graph(self.log_kernel(u, k)[2])
            logits = (self.own_logits(latents) if s.distill_part == "own" else  # [k + T, K]
                      tf.concat(self.graph_logits(graph, latents, context_labels, valid, k), axis=0))
            return Teacher(tf.stop_gradient(logits_e[:k]), tf.stop_gradient(logits))

    def distill_loss(self, teacher_logits, context_out, target_out, valid, own=None):
        """The distillation of the ``teacher``'s logits [k + T, K] into the step's (``distill_lambda``,
        :func:`distillation_loss` at ``distill_temperature``): its mean over the targets plus its mean over
        the valid contexts, as the cross-entropies weigh them (and as they sum over replicas); with
        ``distill_targets: false`` the contexts' mean alone. ``own`` [k + T, K], the own term's part of the
        step's logits: with ``distill_part: own`` what is distilled (the teacher's are its own term's too),
        with ``own_gradient`` the only path of the gradient; either way the graph's term gets none."""
        k, temperature, part = context_out.shape[0], self.settings.distill_temperature, self.settings.distill_part
        if part == "own":
            context_out, target_out = tf.split(own, [k, -1])
        elif part == "own_gradient":  # the step's logits, with the gradient through the own term alone
            context_out, target_out = (tf.stop_gradient(out - term) + term
                                       for out, term in zip((context_out, target_out), tf.split(own, [k, -1])))
        contexts = distillation_loss(teacher_logits[:k], context_out, temperature, valid)
        if not self.settings.distill_targets:
            return contexts
        return distillation_loss(teacher_logits[k:], target_out, temperature) + contexts

    def carrying_label(self, stored_logits, slots, valid):
        """With ``regularize_selective``: the contexts whose stored edges carry their label
        (:func:`label_carrying_contexts`), the only ones the regulariser may hold; else None."""
        if self.settings.regularize_selective is None:
            return None
        labels = tf.gather(self.memory.labels, slots)
        return label_carrying_contexts(stored_logits, labels, valid, self.settings.regularize_selective)

    def training_forward(self, x, y, slots=None, valid=None, present=None) -> Forward:
        """The differentiable part of a step (run it under a GradientTape).

        ``slots, valid`` are the contexts (default: :meth:`select_contexts`); ``present`` [K] bool,
        with ``target_loss: present``, the classes of the whole incoming batch (default: those of
        ``y``, the batch of one device) over which the targets' cross-entropy is. Returns the
        :class:`Forward`: the loss terms, this replica's share of the loss and the :class:`Edges`.
        """
        if slots is None:
            slots, valid = self.select_contexts()
        k = slots.shape[0]
        context_labels = tf.gather(self.memory.labels, slots)
        seed = step_seed(self.seed, self.step_counter, salts.TRAIN_GRAPH)
        contexts = self.context_images(slots, valid, fallback=x)
        if self.settings.augment_contexts:  # (augment: none returns the images as given)
            contexts = self.augmented(contexts, salts.SECOND_AUGMENT)
        targets = self.augmented(x)
        if self.settings.target_views == 2:  # a second draw, in the same trunk pass: [2 T, ...]
            targets = tf.concat([targets, self.augmented(x, salts.THIRD_AUGMENT)], axis=0)
        u, latents = self.embed_step(contexts, targets)  # [k + V T, H] each
        rows, target_cols, log_k = self.log_kernel(u, k)
        logits_e, graph = self.sample_training_graph(log_k, seed)  # E and the raw sample, no self-edges
        own = self.own_logits(latents)  # [k + V T, K] or None: the own head's term, once
        context_out, target_out = self.graph_logits(graph, latents, context_labels, valid, k, own)
        target_labels = tf.tile(y, [self.settings.target_views])  # each view a target with the image's label
        context_ce, context_loss, target_loss, num_valid = self.cross_entropies(
            context_out, target_out, context_labels, target_labels, valid, present)
        teacher = self.teacher(contexts, targets, context_labels, valid)
        regularized, graph_loss = self.graph_regularization(logits_e, slots, valid, context_ce, teacher)
        context_terms = self.settings.context_lambda * context_loss + self.settings.graph_lambda * graph_loss
        if self.settings.distill_lambda > 0:  # the average's predictions distilled (rule 19)
            distill_loss = self.distill_loss(teacher.logits, context_out, target_out, valid, own)
            context_terms += self.settings.distill_lambda * distill_loss
        if self.settings.vote_lambda > 0:  # the graph's own vote for the label (rule 13)
            vote_loss = self.vote_loss(logits_e, context_labels, target_labels, valid, k, present)
            context_terms += self.settings.vote_lambda * vote_loss
        loss = target_loss + context_terms
        # Gradients are summed over replicas: each weighs its targets by its share of the global
        # batch and the (replicated) context terms by 1 / R.
        # The first batch only fills the memory: with no context to attend to, nothing is learned.
        learning = tf.cast(tf.reduce_any(valid), tf.float32)
        logs = {"loss": loss * learning}
        replica_loss = learning * (target_loss + context_terms) / num_replicas()
        logs.update(target_loss=target_loss * learning, context_loss=context_loss, graph_loss=graph_loss,
                    regularized_fraction=tf.reduce_sum(tf.cast(regularized, tf.float32)) / num_valid)
        if self.settings.vote_lambda > 0:
            logs["vote_loss"] = vote_loss * learning
        if self.settings.distill_lambda > 0:
            logs["distill_loss"] = distill_loss * learning
        # logits between all images for the edge memory (no gradient), in two blocks of columns:
        # to the contexts [k + T, k] and to the targets [k + T, T]; of the first view only
        n = k + x.shape[0]
        edges = Edges(u[:n], tf.identity(self.kernel_log_scale), logits_e[:n],  # the scale as read before the update
                      logit_of_exp(tf.matmul(rows[:n], target_cols[:x.shape[0]], transpose_b=True)), context_ce,
                      regularized)
        return Forward(logs, replica_loss, edges)

    # -------------------------------------------------------------- the update (docs/gcl.md, "Memory update")
    def learn(self, x, y):
        slots, valid = self.select_contexts()  # [k]
        # Under a strategy every replica must launch its collectives in the same order: the
        # global batch is gathered first, the gradients are reduced, then the memory inputs.
        stream_x, stream_y = gather_in_order(x, y)  # the global batch, for the memory
        with tf.control_dependencies([stream_x, stream_y]), tf.GradientTape() as tape:
            present = present_classes(stream_y, self.num_classes) if self.settings.target_loss == "present" else None
            out = self.training_forward(x, y, slots, valid, present)
        # The first batch has no valid context and a zero loss: it only fills the memory, and the
        # optimizer skips the step whole (the authors' code does not step it), so its step count
        # does not advance and the first update is Adam's step 1.
        self.apply_gradients(tape, out.replica_loss, when=tf.reduce_any(valid))
        edges = Edges(*(tf.stop_gradient(t) for t in out.edges[:5]), out.edges.regularized)
        best = tf.gather(self.memory.best_loss, slots)
        if num_replicas() > 1:  # every replica applies the same update, from the global batch
            edges = self.stored_edges(edges, slots, valid, best)
        if self.width_from_median:  # once, at the first step with contexts: the median heuristic
            self.set_width_from_median(edges.embeddings[:slots.shape[0]], valid)
        self.update_memory(edges, slots, valid, best, stream_x, stream_y)
        return out.logs

    def stored_edges(self, edges: Edges, slots, valid, best) -> Edges:
        """On R replicas, the :class:`Edges` of the global batch, the same on every replica
        (after the update): the contexts' cross-entropies and embeddings averaged, the targets'
        embeddings gathered, the held contexts and the edge logits computed again from them."""
        k = edges.context_ce.shape[0]
        with tf.control_dependencies([self.optimizer.iterations.value]):  # after the update
            shared = all_mean(tf.concat([edges.context_ce[:, None], edges.embeddings[:k]], axis=1))  # [k, 1 + H]
        with tf.control_dependencies([shared]):
            target_embeddings = all_gather(edges.embeddings[k:])  # [R T, H]
        context_ce = shared[:, 0]
        regularized = regularized_contexts(valid, best, context_ce, self.settings.regularize_below,
                                           self.carrying_label(self.stored_edge_logits(slots), slots, valid))
        embeddings = tf.concat([shared[:, 1:], target_embeddings], axis=0)
        scale = tf.stop_gradient(edges.kernel_log_scale)  # the forward pass's, not the updated one
        all_logits = edge_logits(embeddings, embeddings, scale)  # [k + R T, k + R T]
        return Edges(embeddings, scale, all_logits[:, :k], all_logits[:, k:], context_ce, regularized)

    def set_width_from_median(self, context_embeddings, valid) -> None:
        """``kernel_width: median``: at the first step with contexts, the kernel's width from the
        contexts' median squared distance (:func:`median_kernel_width`); then it is learned."""
        width = tf.cond(self.kernel_width_set, lambda: tf.constant(0.0),  # computed until it is set
                        lambda: median_squared_distance(context_embeddings, valid))
        now = tf.logical_and(tf.logical_not(self.kernel_width_set), width > 0)
        width = median_kernel_width(width, self.settings.kernel_start_edge)
        scales = [self.kernel_log_scale]
        optimizer = averaging_optimizer(self.optimizer)
        if optimizer is not None:  # the weights' average starts from the width set, not from the one it replaces
            scales.append(average_of(optimizer, self.kernel_log_scale))
        for scale in scales:
            scale.assign(tf.where(now, tf.math.log(tf.maximum(width, 1e-12)), scale))
        self.kernel_width_set.assign(tf.logical_or(self.kernel_width_set, now))

    def update_memory(self, edges: Edges, slots, valid, best, x, y) -> None:
        """The contexts' best losses (min with this step's), then the reservoir insertion of the
        global batch ``x, y`` with its edges (the edge memory's rules) and the reset of the best
        loss of replaced slots."""
        memory = self.memory
        scatter_update(memory.best_loss, slots[:, None], tf.where(valid, tf.minimum(best, edges.context_ce), best))
        new_slots = memory.reservoir_slots(x.shape[0])  # [T], -1: not stored
        if memory.edge_memory == "matrix":
            memory.edge_logits.assign(update_edge_memory(memory.edge_logits, edges.to_contexts, edges.to_targets,
                                                         edges.regularized, new_slots))
        else:
            self._update_edge_embeddings(edges.embeddings, slots, valid, edges.regularized, new_slots)
        _, replaced = replaced_source_index(new_slots, self.capacity)
        memory.best_loss.assign(tf.where(replaced, math.inf, memory.best_loss))
        memory.write(new_slots, x, y)

    def _update_edge_embeddings(self, embeddings, slots, valid, regularized, new_slots):
        """Linear edge memory: a context at a new low stores its current edge embedding; a new
        sample stores its own (the rules of the matrix store, per slot instead of per pair)."""
        k = slots.shape[0]
        refresh = tf.logical_and(valid, tf.logical_not(regularized))  # [k]
        scatter_update(self.memory.edge_embeddings, tf.boolean_mask(slots, refresh)[:, None],
                       tf.boolean_mask(embeddings[:k], refresh))
        stored = new_slots >= 0
        scatter_update(self.memory.edge_embeddings, tf.boolean_mask(new_slots, stored)[:, None],
                       tf.boolean_mask(embeddings[k:], stored))
