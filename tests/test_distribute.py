"""tf.distribute: MirroredStrategy on 2 logical CPU devices and MultiWorkerMirroredStrategy with
2 local worker processes compute what a single-device run computes (same seed)."""
import json
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import fresh_env, run_script

CONFIG = textwrap.dedent("""\
    seed: 2
    benchmark: {name: permuted, source: digits, dataset: digits, num_tasks: 2, samples_per_task: 300,
                test_samples_per_task: 100}
    method: {name: gcl}
    model: {hidden_size: 32}
    train: {optimizer: sgd, learning_rate: 0.1, verbose: 0}
    eval: {batch_size: 50}
    presets:  # on top of each method's small test settings (its class's test_settings)
      gcl: {method: {memory_size: 60, context_temperature: 0.3, target_temperature: 1.0, graph_lambda: 1.0}}
""")

# Runs each method on one device and mirrored over 2 logical CPUs, in a fresh process (logical
# devices must be configured before TensorFlow starts), and prints the results.
MIRRORED = textwrap.dedent("""\
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from gcl_tf import config as config_lib, methods
    from gcl_tf.train import run
    config_path, out = sys.argv[1], sys.argv[2]
    report = {}
    for run_name in sys.argv[3].split(","):
        method, _, variant = run_name.partition("+")  # er+ema: with the weights' average (train.ema_momentum)
        small = [f"method.{k}={v}" for k, v in methods.method_class(method).test_settings.items()
                 if method != "gcl" or k != "memory_size"]  # (GCL's: the preset's)
        small += {"": [], "ema": ["train.ema_momentum=0.5"],  # gcl+teacher: its regulariser held to the average
                  "teacher": ["train.ema_momentum=0.5", "method.graph_target=average"],
                  "distill": ["train.ema_momentum=0.5", "method.graph_target=average", "method.distill_lambda=5.5"]
                  }[variant]
        if method == "gcl":  # with its extensions: the head's own term, the loss over the global batch's classes
            small += ["method.own_latent=true", "method.target_loss=present"]
        for mode in ("none", "mirrored"):
            config = config_lib.load_config(config_path, [f"method.name={method}", f"train.distribute={mode}",
                                                          "train.devices=[/cpu:0, /cpu:1]", *small])
            result = run(config, output_dir=os.path.join(out, run_name, mode), overwrite=True, verbose=0)
            report[f"{run_name}/{mode}"] = result["accuracy_matrix"]
            report[f"{run_name}/{mode}/steps"] = result["train_steps"]
            # every variable at the end (weights, optimizer, memory), from the final checkpoint
            folder = os.path.join(out, run_name, mode, "checkpoints")
            reader = tf.train.load_checkpoint(folder)
            state = {n: reader.get_tensor(n) for n, _ in tf.train.list_variables(folder)
                     if n.startswith(("model/", "optimizer/"))}
            np.savez(os.path.join(out, run_name, mode, "state.npz"), **state)
    print("REPORT " + json.dumps(report))
""")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dist") / "config.yaml"
    path.write_text(CONFIG)
    return path


@pytest.mark.slow
def test_mirrored_on_two_devices_equals_single_device(config_file, tmp_path):
    import numpy as np

    from gcl_tf import methods

    names = methods.distributed_names()  # every method that runs distributed: a new one too
    assert {"finetune", "er", "gcl", "derpp", "er_ace"} <= set(names)
    names += ["er+ema", "gcl+teacher", "gcl+distill"]  # with the weights' averages; GCL held to them, distilling them

    report = run_script(tmp_path / "mirrored.py", MIRRORED, config_file, tmp_path / "runs", ",".join(names),
                        timeout=900)
    for method in names:
        single, mirrored = np.array(report[f"{method}/none"]), np.array(report[f"{method}/mirrored"])
        assert report[f"{method}/none/steps"] == report[f"{method}/mirrored/steps"] == 60
        np.testing.assert_allclose(mirrored, single, atol=1e-6, err_msg=method)
        if not method.startswith("gcl"):  # they learned: the comparison is not vacuous (GCL is slower to start)
            assert single[-1].mean() > 30, (method, single)
        a = np.load(tmp_path / "runs" / method / "none" / "state.npz")
        b = np.load(tmp_path / "runs" / method / "mirrored" / "state.npz")
        assert sorted(a.files) == sorted(b.files) and len(a.files) > 5
        memory = [n for n in a.files if "memory" in n]
        assert method != "gcl" or any("edge_logits" in n for n in memory)
        if method == "er+ema":  # the optimizer's averages (one per weight) are compared too
            assert len(a.files) > len(np.load(tmp_path / "runs" / "er" / "none" / "state.npz").files)
        assert method != "derpp" or any("memory/logits" in n for n in memory)  # the stored logits agree too
        for name in a.files:  # weights, optimizer slots, memory, counters
            got, want = b[name], a[name]
            atol = 1e-5
            if "edge_logits" in name:  # a context's edge to itself is never read (self-edges are removed);
                got, want = got.copy(), want.copy()  # it is logit(k ~ 1), where round-off in the two
                np.fill_diagonal(got, 0.0)  # paths' distances moves it most
                np.fill_diagonal(want, 0.0)
                # a logit is -d^2 / (2 w) less log(1 - k): the round-off of the distances' sums of
                # squares scales with the largest logits, and is largest where k ~ 0.5
                atol = 1e-5 * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=f"{method} {name}")


# A few steps of each method on one device and mirrored over 2 logical CPUs, through model.fit
# (no evaluation, no checkpoint: the fast form of the test above), in a fresh process.
FEW_STEPS = textwrap.dedent("""\
    import contextlib, json, sys
    import keras
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from gcl_tf import config as config_lib, methods
    from gcl_tf.callbacks import TaskBoundary
    from gcl_tf.distribute import distribute_batches, make_strategy
    from gcl_tf.saving import method_state
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (60, 8, 8, 1), dtype=np.uint8), rng.integers(0, 10, 60).astype(np.int32)
    report = {}
    for entry in sys.argv[1].split(","):
        method, _, variant = entry.partition(":")
        states = []
        for mode in ("none", "mirrored"):
            raw = {"seed": 2, "method": {"name": method, **methods.method_class(method).test_settings},
                   "model": {"hidden_size": 16}, "train": {"distribute": mode, "devices": ["/cpu:0", "/cpu:1"]}}
            if method == "gcl":  # the regulariser and the replicas' edges at work within a few steps
                raw["method"].update(graph_lambda=1.0, context_temperature=0.3, target_temperature=1.0)
            if variant == "selective":  # the replicas read the held contexts from the stored edges' vote too
                raw["method"].update(regularize_selective=1.0, regularize_below=None)
            config = config_lib.resolve(raw)
            strategy = make_strategy(config.train)
            keras.utils.set_random_seed(config.seed)  # as a run seeds before it builds its model
            with strategy.scope() if strategy else contextlib.nullcontext():
                model = methods.build(config, (8, 8, 1), 10)
                model.compile_for_training(config.train)
            stream = tf.data.Dataset.from_tensor_slices((x, y)).batch(10, drop_remainder=True)
            fed = stream if strategy is None else distribute_batches(strategy, stream, 10)
            boundary = TaskBoundary(0, stream)  # the task's own stream for its end hooks, as a run gives it
            model.fit(fed, epochs=1, steps_per_epoch=6, verbose=0, callbacks=[boundary])
            state = {f"weight/{i}": v.numpy() for i, v in enumerate(model.weights)}
            state.update({f"optimizer/{i}": v.numpy() for i, v in enumerate(model.optimizer.variables)})
            state.update({f"state/{k}": v.numpy() for k, v in method_state(model).items()})
            states.append(state)
        single, mirrored = states
        assert sorted(single) == sorted(mirrored), entry

        def difference(k):  # relative to the value's scale; exact for integers and flags
            if single[k].dtype.kind != "f":
                return 0.0 if np.array_equal(mirrored[k], single[k]) else 1.0
            return float(np.max(np.abs(mirrored[k] - single[k]), initial=0.0) /
                         max(1.0, float(np.max(np.abs(single[k]), initial=0.0))))

        report[entry] = {"steps": int(single["state/step_counter"]), "memory": [k for k in single if "memory" in k],
                          "differences": {k: difference(k) for k in single if "edge_logits" not in k}}
    print("REPORT " + json.dumps(report))
""")


def test_a_few_mirrored_steps_are_the_single_device_steps(tmp_path):
    """The fast form of test_mirrored_on_two_devices_equals_single_device: every method that runs
    distributed takes six steps of one stream on one device and mirrored over two: every variable
    after them (weights, optimizer slots, the memory and its counters) is the same."""
    from gcl_tf import methods

    names = methods.distributed_names() + ["gcl:selective"]  # and GCL's regulariser that waits
    report = run_script(tmp_path / "few_steps.py", FEW_STEPS, ",".join(names), timeout=600)
    assert sorted(report) == sorted(names)
    for method, found in report.items():
        assert found["steps"] == 6 and (found["memory"] or method == "finetune"), method  # the memory compared too
        worst = max(found["differences"], key=found["differences"].get)
        assert found["differences"][worst] < 1e-5, (method, worst, found["differences"][worst])


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.parametrize("method", ["gcl"])
@pytest.mark.slow
def test_multi_worker_with_two_local_workers_agrees_with_single_device(config_file, tmp_path, method):
    import numpy as np

    single = subprocess.run(
        [sys.executable, "-m", "gcl_tf.train", "--config", str(config_file), "--set", f"method.name={method}",
         "--output", str(tmp_path / "single")], capture_output=True, text=True, timeout=600, env=fresh_env())
    assert single.returncode == 0, single.stderr[-3000:]
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    workers = []
    for index in (1, 0):
        env = fresh_env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "gcl_tf.train", "--config", str(config_file), "--set", f"method.name={method}",
             "--set", "train.distribute=multi_worker", "--output", str(tmp_path / f"worker{index}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    try:
        outputs = [w.communicate(timeout=600) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, (_, err) in zip(workers, outputs):
        assert w.returncode == 0, err[-3000:]
    chief = json.loads((tmp_path / "worker0" / "results.json").read_text())
    reference = json.loads((tmp_path / "single" / "results.json").read_text())
    assert not (tmp_path / "worker1").exists()  # only the chief writes outputs
    assert chief["train_steps"] == reference["train_steps"] == 60
    np.testing.assert_allclose(chief["accuracy_matrix"], reference["accuracy_matrix"], atol=1e-6)


@pytest.mark.slow
def test_distribution_errors_are_one_line(config_file, tmp_path):
    for overrides, expected in [
        (["method.name=gem", "train.distribute=mirrored"], "train.distribute: method gem does not run"),
        # a device the process does not have (one CPU device here): TensorFlow would put that replica on another
        # device, where the two replicas' collectives wait for each other forever
        (["train.distribute=mirrored", "train.devices=[/cpu:0, /cpu:1]"],
         "train.devices: /cpu:1 is not a device of this process; allowed: /cpu:0"),
    ]:
        args = [sys.executable, "-m", "gcl_tf.train", "--config", str(config_file), "--output", str(tmp_path / "o")]
        for o in overrides:
            args += ["--set", o]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=fresh_env())
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
        assert not (tmp_path / "o").exists()


# Two replicas whose replay batches hold different numbers of memory samples; the logged loss goes
# through Keras's own reduction of a training step's logs over the replicas.
LOGGED_LOSS = textwrap.dedent("""\
    import json
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras.src.backend.tensorflow.trainer import reduce_per_replica
    from gcl_tf.methods.replay import global_count, logged, replica_share
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    values = tf.constant([[1.0, 2.0], [10.0, 20.0]])  # replica r's losses: row r
    weights = tf.constant([[1.0, 1.0], [1.0, 0.0]])  # the second replica's second sample: an empty slot

    def step():
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        v, w = values[r], weights[r]
        share = replica_share(v, global_count(w), w)
        return {**logged({"rule": share}), "own_mean": tf.reduce_sum(w * v) / tf.reduce_sum(w)}

    logs = reduce_per_replica(strategy.run(tf.function(step)), strategy, reduction="auto")
    print("LOGS " + json.dumps({k: float(v) for k, v in logs.items()}))
""")


def test_the_logged_replay_loss_is_the_global_mean_after_keras_averages_the_replicas(tmp_path):
    """The rule of gcl_tf/methods/replay.py (ER, DER++, ER-ACE): R times a replica's share of the
    global mean, which Keras's average over replicas turns into the global mean (1 + 2 + 10) / 3;
    a replica's own mean (ER's log before) would average to (1.5 + 10) / 2."""
    logs = run_script(tmp_path / "logged.py", LOGGED_LOSS, tag="LOGS")
    assert logs["rule"] == pytest.approx(13 / 3) and logs["own_mean"] == pytest.approx(5.75)


def test_devices_the_process_lacks_or_that_are_no_device_are_named_in_one_line():
    from gcl_tf.distribute import check_devices
    from gcl_tf.errors import ConfigError

    check_devices(["/cpu:0", "/device:CPU:0", "CPU:0"])  # one device, three spellings
    with pytest.raises(ConfigError, match=r"^train.devices: /cpu:7 is not a device of this process; allowed: /cpu:0"):
        check_devices(["/cpu:0", "/cpu:7"])
    with pytest.raises(ConfigError, match=r"^train.devices: 'gpu0' is not a device name; allowed: /cpu:0"):
        check_devices(["gpu0"])
