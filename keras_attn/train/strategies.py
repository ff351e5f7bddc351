"""Distribution strategies: tf.distribute's (TensorFlow) and keras.distribution's data
parallelism (JAX), which process writes the run's files, and the global batch check."""

import contextlib

import keras

DISTRIBUTE = ("none", "mirrored", "multi-worker", "data-parallel")
TF_STRATEGIES = ("mirrored", "multi-worker")


class NoDistribution:
    """JAX without `--distribute`: one process, Keras' default placement."""

    num_replicas_in_sync = 1
    process_id, num_processes = 0, 1

    def scope(self):
        return contextlib.nullcontext()


class JaxDataParallel:
    """`--distribute data-parallel` on JAX: `keras.distribution.DataParallel` over the devices
    of every process, set as Keras' global distribution. The variables are replicated on every
    device; each step's global batch is split along the batch axis over all devices (each
    process feeds its consecutive share, `Run.batches`), and the gradient is the mean over the
    global batch, as in one process."""

    def __init__(self, coordinator_address=None, num_processes=1, process_id=0):
        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise ValueError(
                "`--process-id` must be in 0 ... `--num-processes` - 1. "
                f"Received: num_processes={num_processes}, process_id={process_id}"
            )
        if num_processes > 1:
            if not coordinator_address:
                raise ValueError(
                    "Data-parallel training over several processes needs "
                    "`--coordinator-address HOST:PORT` (process 0's). "
                    f"Received: coordinator_address={coordinator_address!r}"
                )
            keras.distribution.initialize(coordinator_address, num_processes, process_id)
        self.process_id, self.num_processes = process_id, num_processes
        self.devices = keras.distribution.list_devices()
        # Run.batches shards each global batch over the processes itself (so every process's
        # share is trimmed to the same width); Keras assembles the global batch from them.
        self.distribution = keras.distribution.DataParallel(
            devices=self.devices, auto_shard_dataset=False
        )
        keras.distribution.set_distribution(self.distribution)
        self.num_replicas_in_sync = len(self.devices)

    def scope(self):
        return self.distribution.scope()


def get_strategy(name, logical_cpus=0, coordinator_address=None, num_processes=1, process_id=0):
    """`"none"` -> the default strategy; `"mirrored"`, `"multi-worker"` -> tf.distribute
    strategies (TensorFlow backend); `"data-parallel"` -> `JaxDataParallel` (JAX backend).
    `logical_cpus=N` (N >= 2) first splits the CPU into N logical devices; without a GPU, mirrored
    then runs one replica on each (TensorFlow's default would be the one CPU device); on JAX the
    CPU then shows N devices (set before JAX starts its backend)."""
    if logical_cpus < 0 or logical_cpus == 1:
        raise ValueError(
            f"`--logical-cpus` must be 0 (as the machine is) or >= 2. Received: logical_cpus={logical_cpus}"
        )
    if name not in (None,) + DISTRIBUTE:
        raise ValueError(f"`distribute` must be one of {DISTRIBUTE}. Received: distribute={name!r}")
    backend = keras.backend.backend()
    if name == "data-parallel" and backend != "jax":
        raise ValueError(
            "`--distribute data-parallel` is keras.distribution, which runs on JAX: run with "
            f"KERAS_BACKEND=jax (or use mirrored / multi-worker). Received: backend={backend!r}"
        )
    if name in TF_STRATEGIES and backend != "tensorflow":
        raise ValueError(
            f"`--distribute {name}` is a tf.distribute strategy: run with KERAS_BACKEND=tensorflow "
            f"(on JAX use data-parallel). Received: backend={backend!r}"
        )
    if name != "data-parallel" and (num_processes != 1 or process_id or coordinator_address):
        raise ValueError(
            "`--coordinator-address`, `--num-processes` and `--process-id` belong to "
            f"`--distribute data-parallel`. Received: distribute={name!r}"
        )
    if backend == "jax":
        if logical_cpus:
            import jax

            jax.config.update("jax_num_cpu_devices", logical_cpus)
        if name == "data-parallel":
            return JaxDataParallel(coordinator_address, num_processes, process_id)
        return NoDistribution()
    import tensorflow as tf

    if logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * logical_cpus
        )
    if name in (None, "none"):
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if logical_cpus and not tf.config.list_logical_devices("GPU"):
            return tf.distribute.MirroredStrategy(
                [d.name for d in tf.config.list_logical_devices("CPU")]
            )
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"`distribute` must be one of {DISTRIBUTE}. Received: distribute={name!r}")


def is_chief(strategy):
    """Whether this process writes the run's files: always without a cluster; under
    `MultiWorkerMirroredStrategy` only the chief (the `"chief"` task, or worker 0 when the
    cluster of `TF_CONFIG` has no chief task)."""
    if isinstance(strategy, (NoDistribution, JaxDataParallel)):
        return strategy.process_id == 0
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    return (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def check_global_batch(batch_size, replicas):
    """The global batch is split evenly over the replicas (docs/distributed.md): `batch_size`
    must be a multiple of `replicas`."""
    if batch_size < 1 or batch_size % replicas:
        raise ValueError(
            f"`--batch-size` (the global batch) must be a positive multiple of the {replicas} replicas in sync, "
            f"so that every replica gets an equal share. Received: batch_size={batch_size}"
        )
