"""GCL's head and prediction extensions (own_latent, the vote, target_loss: present) and configs and
learners saved before the defaults changed."""
import dataclasses
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from gcl_harness import small_gcl

from gcl_tf import config as config_lib
from gcl_tf.methods.gcl.config import Config as GCLConfig


def test_the_task_end_check_and_evaluation_log_no_tensorflow_warning(monkeypatch):
    """GCL's task-end check runs eagerly: its test graph samples must not ask tf.map_fn for
    parallel iterations there ("Setting parallel_iterations > 1 has no effect when executing
    eagerly", once in every run); in a graph (evaluate) they still run 4 at a time."""
    import logging

    from tensorflow.python.platform import tf_logging

    from gcl_tf.methods.gcl.prediction import map_parallel_iterations

    monkeypatch.setattr(tf_logging, "_log_counter_per_token", {})  # TF logs it once per process
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    # TF counts retracing per Python function over the process: the other tests' models count too.
    monkeypatch.setattr(polymorphic_function, "_frequent_tracing_detector_manager",
                        polymorphic_function._FrequentTracingDetectorManager())
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    tf.get_logger().addHandler(handler)
    try:
        model, stream = small_gcl()
        model.fit(stream, verbose=0)
        model.on_task_end(0, stream)
        model.evaluate(stream, verbose=0)
    finally:
        tf.get_logger().removeHandler(handler)
    assert [record.getMessage() for record in records] == []
    assert map_parallel_iterations() == 1 and tf.function(map_parallel_iterations)() == 4


# ----------------------------------------------------------------------------- own_latent
def test_own_latent_adds_the_images_own_term_to_every_graphs_logits(tmp_path):
    """own_latent: the head reads [ReLU(Z), ReLU(l)] of each image: with deterministic graphs the
    logits are penultimate(x) @ output_layer().kernel + bias, penultimate [N, 3H] (2H without it);
    the own head learns (its gradient is not zero) and a saved learner keeps it. With the own
    head's weights at 0 the predictions are the paper's head's."""
    import gcl_tf

    assert GCLConfig().own_latent is True  # our default since issue 33 (the paper's head: false)
    paper, stream = small_gcl(stochastic_graphs=False, own_latent=False)
    assert paper.own_head is None
    model, _ = small_gcl(stochastic_graphs=False, own_latent=True)
    model.fit(stream, verbose=0)
    x, y = next(iter(stream))
    features = model.penultimate(x).numpy()
    assert features.shape == (10, 3 * 16)
    layer = model.output_layer()
    logits = features @ layer.kernel.numpy() + layer.bias.numpy()
    log_probs = model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy()
    np.testing.assert_allclose(log_probs, tf.nn.log_softmax(logits).numpy(), rtol=1e-4, atol=1e-4)
    with tf.GradientTape() as tape:
        out = model.training_forward(x, tf.cast(y, tf.int32))
    grad = tape.gradient(out.logs["loss"], model.own_head.kernel)
    assert grad is not None and float(tf.reduce_max(tf.abs(grad))) > 0
    path = str(tmp_path / "learner.keras")
    model.save(path)
    loaded = gcl_tf.load_model(path)
    assert loaded.own_latent and loaded.get_config()["own_latent"] is True
    np.testing.assert_allclose(loaded.predict_log_probs(x, tf.ones([10], tf.bool)).numpy(), log_probs, rtol=1e-5,
                               atol=1e-6)
    without = model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy()
    model.own_head.kernel.assign(tf.zeros_like(model.own_head.kernel))
    paper_head = tf.nn.log_softmax(features[:, :32] @ model.output_head.kernel.numpy() + layer.bias.numpy())
    np.testing.assert_allclose(model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy(), paper_head.numpy(),
                               rtol=1e-4, atol=1e-4)
    assert not np.allclose(without, paper_head.numpy(), atol=1e-3)  # the own term moved the predictions


def test_own_latent_adds_its_term_to_each_sampled_test_graph():
    """With sampled test graphs (the default): the prediction is the average over the samples of
    log_softmax(f3(ReLU(Z_s)) + W_own ReLU(l)); with W_own = 0 it is the paper's head's."""
    from gcl_tf.methods.gcl.graph import average_log_probs, relaxed_bernoulli

    model, stream = small_gcl(own_latent=True, test_graph_samples=3)
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]
    mask = tf.ones([10], tf.bool)
    logits_e, values, noise, latents = model.test_graphs(x, seed=(3, 4))
    own = model.own_logits(latents)
    assert noise.shape == (3, 10, 20) and own.shape == (10, 10)
    temperature = model.settings.test_temperature
    by_hand = average_log_probs(tf.stack([
        tf.nn.log_softmax(model.classify(relaxed_bernoulli(logits_e, temperature, eps), values) + own)
        for eps in noise]))
    got = model.log_probs_of_test_graphs(logits_e, values, noise, latents, mask)
    np.testing.assert_allclose(got.numpy(), by_hand.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.predict_log_probs(x, mask, seed=(3, 4)).numpy(), got.numpy(), rtol=1e-5,
                               atol=1e-6)
    model.own_head.kernel.assign(tf.zeros_like(model.own_head.kernel))
    np.testing.assert_allclose(model.predict_log_probs(x, mask, seed=(3, 4)).numpy(),
                               model.log_probs_of_test_graphs(logits_e, values, noise, None, mask).numpy(),
                               rtol=1e-4, atol=1e-5)
    assert not np.allclose(got.numpy(), model.log_probs_of_test_graphs(logits_e, values, noise, None, mask).numpy(),
                           atol=1e-3)


# ----------------------------------------------------------------------------- test_prediction
def test_label_vote_logits_are_the_kernel_weighted_vote_of_the_memorys_labels():
    """softmax(label_vote_logits) = sum_j g_j [y_j = y] / sum_j g_j, by hand; a row with no edge
    votes uniformly; an empty slot (a zero label row) votes for nothing."""
    from gcl_tf.methods.gcl.graph import label_vote_logits

    graph = np.array([[0.9, 0.3, 0.6, 0.5], [0.0, 0.0, 0.0, 0.0]], np.float32)  # [N=2, M=4]
    labels = np.eye(3, dtype=np.float32)[[0, 2, 2, 1]]
    labels[3] = 0.0  # slot 3 is empty
    probs = tf.nn.softmax(label_vote_logits(tf.constant(graph), tf.constant(labels))).numpy()
    np.testing.assert_allclose(probs[0], [0.9 / 1.8, 0.0, 0.9 / 1.8], atol=1e-6)
    np.testing.assert_allclose(probs[1], [1 / 3] * 3, atol=1e-6)


def test_vote_predicts_from_the_expected_graph_and_the_memorys_labels_only():
    """test_prediction: vote: log p(y | x) is the log of the vote along sigmoid(E) from x to the
    filled memory (computed here in numpy from the model's embeddings), for every seed (nothing
    is sampled), masked classes excluded; training is the head's, to the bit."""
    from gcl_tf.methods.gcl.graph import edge_logits

    head, stream = small_gcl()
    head.fit(stream, verbose=0)
    model, _ = small_gcl(test_prediction="vote")
    model.fit(stream, verbose=0)
    for a, b in zip(head.trainable_weights, model.trainable_weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = next(iter(stream))[0]
    filled = model.memory.filled().numpy()
    assert filled.any()
    u_c, _ = model.embed(model._context_images(), training=False)
    u_t, _ = model.embed(x, training=False)
    graph = tf.sigmoid(edge_logits(u_t, u_c, model.kernel_log_scale)).numpy() * filled
    votes = graph @ np.eye(10)[model.memory.labels.numpy()]  # [N, K]
    mask = np.arange(10) < 6
    expected = votes[:, mask] / votes[:, mask].sum(-1, keepdims=True)
    got = np.exp(model.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy())
    np.testing.assert_allclose(got[:, mask], expected, rtol=1e-4, atol=1e-6)
    assert np.all(got[:, ~mask] < 1e-6)
    np.testing.assert_allclose(model.predict_log_probs(x, tf.constant(mask), seed=(5, 6)).numpy()[:, mask],
                               np.log(expected), rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.exp(head.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy())[:, mask],
                           expected, atol=1e-2)  # the paper's head predicts otherwise


def test_the_vote_alone_draws_no_test_graph_noise():
    """The vote samples no graph: with it as the only prediction neither the memory estimate nor
    the model holds the [S, N, M] test noise; with the head beside it (or as the prediction) both do."""
    import gcl_tf
    from gcl_tf.config import load_config
    from gcl_tf.methods.gcl.model import GCL

    from conftest import REPO

    def noise_buffers(*sets):
        config = load_config(os.path.join(REPO, "configs", "split_cifar10_ocl.yaml"), ["method.name=gcl", *sets])
        return [name for name, _ in GCL.memory_buffers(config) if "noise" in name]

    assert noise_buffers() == ["the test graphs' noise [30, 500, 500]"]
    assert noise_buffers("method.test_prediction=vote") == []
    assert noise_buffers("method.test_prediction=vote", "method.also_test_predictions=[head]") == noise_buffers()
    assert noise_buffers("method.also_test_predictions=[vote]") == noise_buffers()

    def model(**keys):
        return gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, eval_batch_size=50,
                          **keys)

    assert model(test_prediction="vote")._test_noise is None
    assert model(test_prediction="vote", also_test_predictions=["head"])._test_noise is not None


def test_head_vote_sums_the_heads_and_the_votes_log_probabilities():
    """test_prediction: head_vote: log p = log_softmax(log p_head + log p_vote), the head's over the
    same sampled test graphs (the same seed), masked classes excluded; it draws test graph noise."""
    model, stream = small_gcl(also_test_predictions=["head_vote"])
    model.fit(stream, verbose=0)
    assert model.settings.draws_test_noise and model._test_noise is None  # (no eval batch size given)
    x = next(iter(stream))[0]
    mask = tf.constant(np.arange(10) < 6)
    read = {}
    for prediction in ("head", "vote", "head_vote"):
        with model.evaluation_variant({"test_prediction": prediction}):
            read[prediction] = model.predict_log_probs(x, mask, seed=(1, 2)).numpy()
    expected = tf.nn.log_softmax(read["head"] + read["vote"]).numpy()
    np.testing.assert_allclose(read["head_vote"][:, :6], expected[:, :6], rtol=1e-4, atol=1e-4)
    assert np.all(np.exp(read["head_vote"][:, 6:]) < 1e-6)
    for one in ("head", "vote"):
        assert not np.allclose(read["head_vote"], read[one], atol=1e-3), one


def test_class_mean_logits_are_cosines_to_the_memorys_normalised_class_means():
    """ncm's logits by hand: each class's mean of the memory's unit feature vectors, its direction,
    cosines over the temperature; an empty slot counts for no class, an absent class is never predicted."""
    from gcl_tf.methods.gcl.graph import class_mean_logits

    memory = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [9.0, -9.0]], np.float32)  # [M=4, H=2]
    labels = np.eye(3, dtype=np.float32)[[0, 0, 1, 1]]
    labels[3] = 0.0  # slot 3 is empty: its features do not pull class 1's mean
    x = np.array([[1.0, 0.1], [-1.0, 1.0]], np.float32)
    got = class_mean_logits(tf.constant(x), tf.constant(memory), tf.constant(labels), temperature=0.5).numpy()
    means = np.array([[1.0 / np.sqrt(2.0)] * 2, [1.0, 0.0]])  # class 0: (1,0)+(0,1); class 1: (1,0)
    cosines = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ means.T
    np.testing.assert_allclose(got[:, :2], cosines / 0.5, rtol=1e-5, atol=1e-6)
    assert np.all(got[:, 2] <= -1e8)  # class 2 has no sample in the memory


def test_ncm_predicts_the_nearest_class_mean_of_relu_latents_and_draws_no_noise():
    """test_prediction: ncm: the class of the nearest memory class mean of the normalised ReLU(l)
    (numpy from the model's embeddings), masked classes excluded; no graph noise; training is the head's."""
    model, stream = small_gcl(test_prediction="ncm")
    assert not model.settings.draws_test_noise
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]
    filled = model.memory.filled().numpy()
    _, l_c = model.embed(model._context_images(), training=False)
    _, l_t = model.embed(x, training=False)

    def unit(a):
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    memory = unit(np.maximum(l_c.numpy(), 0.0))[filled]
    labels = model.memory.labels.numpy()[filled]
    mask = np.isin(np.arange(10), labels[:4])  # some classes the memory holds
    means = np.stack([unit(memory[labels == c].mean(0, keepdims=True))[0] if (labels == c).any()
                      else np.zeros(memory.shape[1]) for c in range(10)])
    scores = np.where(mask, unit(np.maximum(l_t.numpy(), 0.0)) @ means.T, -np.inf)
    got = model.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy()
    np.testing.assert_array_equal(got.argmax(-1), scores.argmax(-1))
    assert np.all(np.exp(got[:, ~mask]) < 1e-6)
    with model.evaluation_variant({"test_prediction": "head"}):
        assert not np.array_equal(model.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy(), got)


@pytest.mark.slow
def test_also_test_predictions_evaluates_the_vote_in_the_same_run_as_a_run_of_its_own(tmp_path):
    """also_test_predictions: [vote] gives, beside the head's matrix, the accuracy matrix a run
    with test_prediction: vote gives (training does not depend on it)."""
    from gcl_tf import train

    from helpers import digits_config

    def config(**method):
        return digits_config({"name": "gcl", "memory_size": 50, **method},
                             benchmark={"num_tasks": 2, "samples_per_task": 100})

    both = train.run(config(also_test_predictions=["vote"]), str(tmp_path / "both"), verbose=0)
    alone = train.run(config(test_prediction="vote"), str(tmp_path / "alone"), verbose=0)
    vote = both["evaluations"]["vote"]
    assert vote["settings"] == {"test_prediction": "vote"}
    assert vote["accuracy_matrix"] == alone["accuracy_matrix"] and vote["acc"] == alone["acc"]
    assert both["accuracy_matrix"] != vote["accuracy_matrix"]


# ----------------------------------------------------------------------------- target_loss
def test_target_loss_present_leaves_the_classes_absent_from_the_batch_alone():
    """target_loss: present (ER-ACE's asymmetric cross-entropy for the incoming batch): the
    targets' cross-entropy is over the classes in the batch only. With the context and graph
    terms off, the loss's gradient on the output biases of the classes absent from the batch is
    zero (with ``all``, the paper, it pushes them down), the loss is below ``all``'s on the same
    state, and a batch holding every class gives both the same loss."""
    import gcl_tf

    assert GCLConfig().target_loss == "present" == gcl_tf.GCL(num_classes=3, input_shape=(4,)).settings.target_loss
    from gcl_tf.errors import ConfigError

    with pytest.raises(ConfigError, match="GCL.target_loss: 'some' is not allowed; allowed: all, present"):
        gcl_tf.GCL(num_classes=3, input_shape=(4,), target_loss="some")
    model, stream = small_gcl(stochastic_graphs=False, context_lambda=0.0, graph_lambda=0.0, own_latent=True,
                               target_loss="present")
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]

    def loss_and_bias_gradient(target_loss, labels):
        model.settings = dataclasses.replace(model.settings, target_loss=target_loss)
        with tf.GradientTape() as tape:
            out = model.training_forward(x, tf.constant(labels, tf.int32))
        return float(out.logs["loss"]), tape.gradient(out.logs["loss"], model.output_head.bias).numpy()

    labels = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]  # classes 3-9 absent
    present_loss, present_grad = loss_and_bias_gradient("present", labels)
    all_loss, all_grad = loss_and_bias_gradient("all", labels)
    assert np.all(present_grad[3:] == 0) and np.all(np.abs(present_grad[:3]) > 0)
    assert np.all(all_grad[3:] > 0)  # the paper's loss lowers the absent classes' logits
    assert 0 < present_loss < all_loss
    every_class = list(range(10))
    assert loss_and_bias_gradient("present", every_class)[0] == pytest.approx(
        loss_and_bias_gradient("all", every_class)[0], rel=1e-6)


def test_a_config_or_learner_saved_before_the_defaults_changed_reads_back_as_it_ran(tmp_path):
    """own_latent and target_loss became true / present in issue 33: a config.yaml or learner saved
    before lacks them and ran with the paper's false / all, which is how it reads back (resume,
    the suite's finished-run check, export, keras load); a user's config without them gets today's
    defaults, and a config saved since holds them both."""
    import yaml

    import gcl_tf

    assert GCLConfig.former_defaults == {"own_latent": False, "target_loss": "all"}
    user = config_lib.resolve({"method": {"name": "gcl"}})
    assert user.method.own_latent is True and user.method.target_loss == "present"
    saved = user.to_dict()
    assert saved["method"]["own_latent"] is True and saved["method"]["target_loss"] == "present"
    before = user.to_dict()
    del before["method"]["own_latent"], before["method"]["target_loss"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(before))
    for read in (config_lib.load_saved_config(str(path)).to_dict(), config_lib.saved_as_today(before)):
        assert read["method"]["own_latent"] is False and read["method"]["target_loss"] == "all"
    assert config_lib.saved_as_today(saved) == saved  # saved since: as saved
    # As --config: a file in a run's or search's folder reads as it ran, a user's own file with today's defaults.
    assert config_lib.load_config(str(path)).method.own_latent is True
    for beside in ("model.json", "best.json"):
        (tmp_path / beside).write_text("{}")
        read = config_lib.load_config(str(path)).method
        assert read.own_latent is False and read.target_loss == "all"
        (tmp_path / beside).unlink()
    er = config_lib.resolve({"method": {"name": "er"}}).to_dict()
    assert config_lib.with_former_defaults(er) == er  # another method's keys are left alone

    model, _ = small_gcl()
    assert model.own_head is not None and model.settings.target_loss == "present"
    learner = model.get_config()
    restored = gcl_tf.GCL.from_config(learner)
    assert restored.own_head is not None and restored.settings.target_loss == "present"
    del learner["own_latent"], learner["target_loss"]
    old = gcl_tf.GCL.from_config(learner)
    assert old.own_head is None and old.settings.target_loss == "all"

