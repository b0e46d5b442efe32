"""Every random stream's salt, in one table.

Randomness is keyed on the run's seed, a counter and a salt naming the stream's purpose, so that
streams of different purposes are independent and a restored run draws exactly what the
uninterrupted one would. The data's streams are numpy generators keyed on ``[seed, task, salt]``
(:func:`gcl_tf.data.rng.task_rng`); the compiled step's are stateless TensorFlow seeds
``step_seed(seed, counter, salt)`` (:mod:`gcl_tf.memory.state`). A new stream takes a new value
here: a value changed or reused changes every run that draws from it. Pure constants: importing
this module imports nothing.
"""

# ----------------------------------------------------------------------------- the data (per task)
TRANSFORM = 1  # a task's permutation or rotation
TRAIN = 2  # which training samples a task holds
VALIDATION = 3  # the validation samples held out of them
TEST = 4  # which test samples a task holds
ORDER = 5  # the order of a task's stream
FLIP = 6  # the training images flipped (augment: flip)
CLASS_ORDER = 7  # split, class_order: random: the classes' order (one draw per run, task 0's stream)

# ----------------------------------------------------------------------------- the compiled step
RESERVOIR = 101  # reservoir sampling's slots (counter: samples seen)
REPLAY = 102  # a replay batch (or MIR's candidates), iCaRL's and A-GEM's memory draws (counter: the step)
SECOND_REPLAY = 103  # DER++'s second, independent replay batch
AUGMENT = 104  # the in-step augmentation of the images a step trains on (augment: ocl)
SECOND_AUGMENT = 105  # a second set of images or view in the same step (ER-ACE's and DER++'s replay)
THIRD_AUGMENT = 106  # a third (DER++'s second replay batch)
ONPRO_VIEWS = 107  # OnPro: its own transform of every view and the feature slices (split into sub-streams)
ONPRO_MIXUP = 108  # OnPro: APF's mixups (split into sub-streams)

TRAIN_GRAPH = 201  # GCL: the context graph sampled in a training step
TEST_GRAPH = 202  # GCL: the test graphs sampled in a prediction
CONTEXT_BATCH = 203  # GCL: the memory's context batch

# ----------------------------------------------------------------------------- serving
SERVING = 301  # an exported SavedModel's prediction seed
