"""The parts registered methods take in the paper's suite, read from ``paper_suite.yaml`` beside this
module (data, not code: the benchmark's modules name no method). Read once, when imported, without
TensorFlow; a name there that is not a registered method is refused then."""
from __future__ import annotations

import os

import yaml

from gcl_tf import methods

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper_suite.yaml")


def read(path: str = PATH) -> dict:
    """The roles file as a dict, each method name checked against the registry."""
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    named = [data["lead"], *data["memory_study"], *data["tsne"], *data["today_leads"], *data["presets_check"]]
    unknown = [name for name in named if name not in methods.REGISTRY]
    if unknown:
        raise ValueError(f"{path}: {unknown[0]!r} is not a registered method; allowed: {', '.join(methods.REGISTRY)}")
    if len(data["memory_study"]) != 2:
        raise ValueError(f"{path}: memory_study names two methods (the baseline, then the lead)")
    return data


_ROLES = read()

#: The paper's method: the tables' lead columns, the context graph figure, the ablation's and the
#: graph_lambda study's method.
LEAD: str = _ROLES["lead"]
#: The memory study's two methods: the paper's baseline, then its method.
MEMORY_METHODS: tuple = tuple(_ROLES["memory_study"])
#: The t-SNE figure's panels, left to right.
TSNE_METHODS: tuple = tuple(_ROLES["tsne"])
#: The lead columns of the table beside today's protocol's re-runs.
TODAY_LEADS: tuple = tuple(_ROLES["today_leads"])
#: The methods ``python -m gcl_tf.benchmark presets`` checks without ``--methods``.
PRESETS_CHECK: tuple = tuple(_ROLES["presets_check"])


def lead_variant(suffix: str) -> str:
    """The folder of the lead method's study variant ``suffix`` (``""``: its main run)."""
    return f"{LEAD}-{suffix}" if suffix else LEAD


#: The ablation: (variant folder, label, config overrides on top of the lead's preset).
ABLATIONS: tuple = tuple((lead_variant(row["suffix"]), row["label"], tuple(row["overrides"]))
                         for row in _ROLES["ablation"])
#: A variant read from another run's evaluation: {variant: (trained variant, its evaluation name)}.
DERIVED: dict = {lead_variant(row["suffix"]): (lead_variant(row["read_from"][0]), row["read_from"][1])
                 for row in _ROLES["ablation"] if row.get("read_from")}
#: λ_G 0 in the graph_lambda study: this ablation variant's run (one run serves both studies).
NO_GRAPH_REG: str = lead_variant(_ROLES["graph_lambda_zero"])
