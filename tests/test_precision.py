"""train.mixed_precision and train.jit_compile: auto, on CPU (issue 15, items 2 and 3).

bfloat16 and float16 train (the layers really compute in the low precision, the loss stays
finite and close to float32's), float16 scales its loss, a run under a mixed policy resumes from
its checkpoint exactly, methods that cannot take loss scaling are refused in one line, and
``auto`` picks XLA by device type.
"""
import os

import numpy as np
import pytest

from gcl_tf.errors import ConfigError


def digit_batches(count, batch=10):
    """``count`` batches of scikit-learn's digits (8x8x1, float32 in [0, 1]): real images, so a
    few steps of training move the loss."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images[: count * batch] / 16.0).astype(np.float32)[..., None]
    y = digits.target[: count * batch].astype(np.int32)
    return [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]) for i in range(count)]


# "gcl" is the paper's head (make_model's, as in the throughput workloads); "gcl-defaults" the constructor's
# defaults since issue 33: the own-latent head and the present-classes loss.
VARIANTS = {"gcl-defaults": ("gcl", {"own_latent": True, "target_loss": "present"})}


def build(method, policy, **keys):
    from gcl_tf.speed import make_model  # with the speed checks' settings (GCL: the paper's head)

    method, variant = VARIANTS.get(method, (method, {}))
    memory = {"gcl": 40, "er": 40, "derpp": 40, "er_ace": 40}.get(method)
    return make_model(method, (8, 8, 1), memory=memory, hidden=32, mixed_precision=policy, **variant, **keys)


def train_losses(model, batches):
    import tensorflow as tf

    from gcl_tf.benchmark.workloads import counting_step

    step, traces = counting_step(model)
    losses = [float(step(tf.constant(x), tf.constant(y))["loss"]) for x, y in batches]
    assert len(traces) == 1  # one trace under every policy
    return np.array(losses)


def low_precision_layers(model):
    import keras

    return [layer.name for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.Dense) and layer.compute_dtype != "float32"]


@pytest.mark.parametrize("method", [pytest.param("gcl", marks=pytest.mark.slow),
                                    pytest.param("gcl-defaults", marks=pytest.mark.slow), "er", "derpp", "er_ace"])
def test_bfloat16_trains_and_stays_close_to_float32(method):
    import keras

    batches = digit_batches(30)
    reference = train_losses(build(method, "float32"), batches)
    keras.utils.set_random_seed(0)  # the same initial weights
    model = build(method, "mixed_bfloat16")
    losses = train_losses(model, batches)
    assert low_precision_layers(model), "no layer computes in bfloat16: the policy was not applied"
    assert ("own_head" in low_precision_layers(model)) == (method == "gcl-defaults")  # the head's two parts alike
    assert all(v.dtype == "float32" for v in model.trainable_variables)  # float32 weights
    assert model.dtype_policy.name == "float32"  # the method's own math
    assert np.isfinite(losses).all()
    late = slice(10, None)  # (GCL's first step only fills the memory: loss 0)
    assert abs(losses[late].mean() - reference[late].mean()) < 0.1 * reference[late].mean(), (losses, reference)
    assert losses[-10:].mean() < losses[late][:10].mean() or method.startswith("gcl")  # ER & co. learn in 30 steps
    if method.startswith("gcl"):  # predictions are float32 distributions
        import tensorflow as tf

        log_probs = model.predict_log_probs(tf.constant(batches[0][0]), tf.ones([10], tf.bool), samples=3)
        assert log_probs.dtype == tf.float32
        np.testing.assert_allclose(np.exp(log_probs.numpy()).sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("method", ["gcl", "gcl-defaults", "derpp", "er_ace"])
def test_float16_scales_its_loss(method):
    """Under mixed_float16 the optimizer is a LossScaleOptimizer and the loss is scaled before the
    gradients: the weights move as much as under float32 (without the scaling the optimizer
    would divide unscaled gradients by the scale, 2**15, and the weights would barely move)."""
    import keras

    batches = digit_batches(12)

    def weight_change(policy):
        keras.utils.set_random_seed(0)
        model = build(method, policy)
        before = [v.numpy().copy() for v in model.trainable_variables]
        losses = train_losses(model, batches)
        after = [v.numpy() for v in model.trainable_variables]
        return model, losses, np.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(after, before)))

    _, _, reference = weight_change("float32")
    model, losses, change = weight_change("mixed_float16")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert low_precision_layers(model)
    assert np.isfinite(losses).all() and reference > 0
    assert 0.5 < change / reference < 2.0, (change, reference)


def test_methods_without_loss_scaling_are_refused_under_float16_in_one_line(make_config):
    from gcl_tf import methods

    # what each Config declares (supports_loss_scaling); GEM and A-GEM project their gradients, MER moves its weights
    refused = [name for name in methods.names() if not methods.config_class(name).supports_loss_scaling]
    assert {"gem", "agem", "mer"} <= set(refused) and "er" not in refused
    for method in methods.names():  # the others run under float16
        if method not in refused:
            make_config({"method": {"name": method}}, ["train.mixed_precision=mixed_float16"])
    for method in refused:
        with pytest.raises(ConfigError) as info:
            make_config({"method": {"name": method}}, ["train.mixed_precision=mixed_float16"])
        message = str(info.value)
        assert "\n" not in message and message.startswith("train.mixed_precision:") and method in message
        make_config({"method": {"name": method}}, ["train.mixed_precision=mixed_bfloat16"])  # bfloat16 is fine
    with pytest.raises(ConfigError, match="allowed: float32, mixed_float16, mixed_bfloat16"):
        make_config({}, ["train.mixed_precision=float16"])


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_mixed_precision_run_resumes_from_its_checkpoint_exactly(policy, make_config, monkeypatch, tmp_path):
    """GCL under a mixed policy, killed after step 5 of 8: resumed from its step-4 checkpoint it
    ends bit for bit as the uninterrupted run (weights, Adam's slots, the loss scale, memory)."""
    import tensorflow as tf

    from gcl_tf import callbacks, train

    config = make_config({"benchmark": {"num_tasks": 2, "samples_per_task": 40, "test_samples_per_task": 20},
                          "method": {"name": "gcl", "memory_size": 20, "test_graph_samples": 3},
                          "train": {"optimizer": "adam", "learning_rate": 0.003, "checkpoint_every": 4,
                                    "mixed_precision": policy}})
    whole = train.run(config, output_dir=str(tmp_path / "whole"), verbose=0)
    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end

    class Crash(Exception):
        pass

    def crash_after_step_5(self, batch, logs=None):
        if self.step + self._per_call == 5:
            raise Crash()
        return after_batch(self, batch, logs)

    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", crash_after_step_5)
    with pytest.raises(Crash):
        train.run(config, output_dir=str(tmp_path / "crashed"), verbose=0)
    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", after_batch)
    resumed = train.run(config, output_dir=str(tmp_path / "crashed"), verbose=0, resume=True)
    assert resumed["resumed_from_step"] == 4 and resumed["train_steps"] == whole["train_steps"] == 8
    assert resumed["accuracy_matrix"] == whole["accuracy_matrix"]

    def arrays(run):
        path = tf.train.latest_checkpoint(os.path.join(tmp_path, run, "checkpoints"))
        reader = tf.train.load_checkpoint(path)
        skip = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter", "progress/task_seconds", "progress/eval_seconds")
        return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if not any(s in n for s in skip)}

    a, b = arrays("whole"), arrays("crashed")
    assert sorted(a) == sorted(b)
    assert [n for n in a if a[n].tobytes() != b[n].tobytes()] == []
    if policy == "mixed_float16":  # the loss scale is part of the state
        assert any("scale" in n for n in a), sorted(a)
    assert np.isfinite(whole["acc"])
    # the run loads for export (its layers in float32 there: the weights are float32 either way)
    from gcl_tf import export

    model, _, _ = export.load_run(str(tmp_path / "whole"))
    assert int(model.step_counter.numpy()) == 8


# ----------------------------------------------------------------------------- jit_compile: auto
def test_jit_compile_auto_picks_by_device_type():
    from gcl_tf.devices import JIT_COMPILE_BY_DEVICE, resolve_jit_compile

    assert JIT_COMPILE_BY_DEVICE == {"CPU": False, "GPU": True}
    assert resolve_jit_compile("auto", "CPU", replicas=1, deterministic=False) is False
    assert resolve_jit_compile("auto", "GPU", replicas=1, deterministic=False) is True
    assert resolve_jit_compile("auto", "GPU", replicas=2, deterministic=False) is False  # collectives: unmeasured
    assert resolve_jit_compile("auto", "GPU", replicas=1, deterministic=True) is False
    for given in (True, False):  # explicit settings are taken as given, on any device
        assert resolve_jit_compile(given, "CPU", replicas=2, deterministic=True) is given


def test_jit_compile_setting_reaches_the_compiled_model(make_config):
    """On this CPU machine the default, auto, compiles without XLA; true and false are kept; a
    model built inside a tf.device scope is decided for that device."""
    import tensorflow as tf

    from gcl_tf import methods

    assert make_config().train.jit_compile == "auto"
    for setting, expected in (("auto", False), (True, True), (False, False)):
        config = make_config({"train": {"jit_compile": setting}})
        model = methods.build(config, (8, 8, 1), 10)
        model.compile_for_training(config.train)
        assert model.jit_compile is expected, setting
    with pytest.raises(ConfigError, match="train.jit_compile"):
        make_config({"train": {"jit_compile": "sometimes"}})
    from gcl_tf.devices import compute_device_type

    assert compute_device_type() == ("GPU" if tf.config.list_logical_devices("GPU") else "CPU")
    with tf.device("/CPU:0"):
        assert compute_device_type() == "CPU"
