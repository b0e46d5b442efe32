"""The runs each study of ``python -m gcl_tf.benchmark paper`` adds on one benchmark, besides the
main runs: ``(variant folder, method, overrides on top of the method's preset)``
(``paper.plan`` runs each for every seed; one that is a main run appears once).

- ``ablation``: the lead method (the paper's, GCL) without one more component each time
  (``roles.ABLATIONS``);
- ``memory``: the memory study's methods (the paper's two, ER and GCL, ``roles.MEMORY_METHODS``;
  ``--memory-methods`` names others: any preset of the config with a memory) at each memory size
  (the preset's own size: the main run);
- ``backbone``: each method on each trunk of ``layout.BACKBONES``. **The rule, the same for every
  method: a backbone variant is the method's preset with only the trunk's keys replaced**
  (``model.backbone`` and ``model.filters``: the authors' ConvNet with 64 filters, GEM's reduced
  ResNet-18 with 20). Everything else stays the preset's, whether or not it was tuned for that
  trunk: the optimizer, the learning rate, the memory, ``model.hidden_size`` (ignored by both
  trunks; GCL's embedding width H on any trunk) and the method's own keys. So a baseline on the
  ConvNet keeps its ResNet-18 preset's settings, and GCL on the ResNet-18 keeps its ConvNet
  preset's. The run on the preset's own trunk is the main run (folder ``<method>``);
- ``graph_lambda``: the lead method at each ``method.graph_lambda`` (the paper's figure of λ_G), nothing else
  changed. The preset's own value is the main run; 0 is the ablation's no-regularisation run (the
  same training, with its one-sample evaluation besides), so the two studies share it.
"""
from __future__ import annotations

from gcl_tf.benchmark import layout, roles
from gcl_tf.errors import UserError
from gcl_tf.schema import MemoryMethodConfig


def preset_value(path: str, sets, key: str):
    """The method key ``key`` of the config ``path`` with ``sets`` (its ``--set``, the method's
    name first), resolved (a key the config leaves out: its default): what decides a study's main run."""
    from gcl_tf import config as config_lib

    return getattr(config_lib.load_config(path, list(sets)).method, key)


def ablation(path: str, presets) -> list[tuple[str, str, list[str]]]:
    """The ablation's trained variants of the lead method (the DERIVED column is read from another run)."""
    if roles.LEAD not in presets:
        raise UserError(f"{path}: the ablation study needs a {roles.LEAD} preset")
    return [(variant, roles.LEAD, list(overrides)) for variant, _, overrides in roles.ABLATIONS
            if variant not in roles.DERIVED]


def has_memory(method: str) -> bool:
    """Whether ``method`` is a registered method that keeps an episodic memory (its ``Config`` is a
    ``MemoryMethodConfig``; read without TensorFlow)."""
    from gcl_tf import methods as registry

    return method in registry.REGISTRY and issubclass(registry.config_class(method), MemoryMethodConfig)


def memory_methods(path: str, presets, methods=()) -> list[str]:
    """The memory study's methods on the config ``path``: the paper's two (``roles.MEMORY_METHODS``)
    by default, else ``methods`` (``--memory-methods``: any preset of the config with a memory,
    ``er`` runs ER's half of the paper's figure, ``er_ace,derpp`` puts today's baselines beside
    them), in the order of the config's presets."""
    if not methods:
        return list(roles.MEMORY_METHODS)
    allowed = [m for m in presets if has_memory(m)]
    unknown = [m for m in methods if m not in allowed]
    if unknown:
        why = "keeps no memory" if unknown[0] in presets else "has no preset there"
        raise UserError(f"--memory-methods: {unknown[0]!r} {why} ({path}); allowed: {', '.join(allowed)}")
    return [m for m in presets if m in methods]


def memory(path: str, presets, sizes, preset_size, methods=()) -> list[tuple[str, str, list[str]]]:
    """The memory study's methods (:func:`memory_methods`) at each of ``sizes``;
    ``preset_size(method)``: the preset's memory size, whose run is the main run."""
    out = []
    for method in memory_methods(path, presets, methods):
        if method not in presets:
            raise UserError(f"{path}: the memory study needs a {method} preset")
        own = preset_size(method)
        for size in sizes:
            if size == own:
                out.append((method, method, []))
            else:
                out.append((layout.memory_variant(method, size), method, [f"method.memory_size={size}"]))
    return out


def backbone(methods, trunks, preset_trunk) -> list[tuple[str, str, list[str]]]:
    """Each of ``methods`` on each of ``trunks`` (layout.BACKBONES names); ``preset_trunk(method)``:
    the trunk of the method's preset (layout.trunk_of), whose run is the main run."""
    out = []
    for method in methods:
        own = preset_trunk(method)
        for trunk in trunks:
            if trunk == own:
                out.append((method, method, []))
            else:
                out.append((layout.backbone_variant(method, trunk), method, layout.backbone_overrides(trunk)))
    return out


def graph_lambda(path: str, presets, values, preset_value) -> list[tuple[str, str, list[str]]]:
    """The lead method at each of ``values``; ``preset_value()``: its preset's graph_lambda, whose
    run is the main run."""
    lead = roles.LEAD
    if lead not in presets:
        raise UserError(f"{path}: the graph_lambda study needs a {lead} preset")
    own = preset_value()
    no_reg = next(overrides for variant, _, overrides in roles.ABLATIONS if variant == roles.NO_GRAPH_REG)
    out = []
    for value in values:
        if float(value) == float(own):
            out.append((lead, lead, []))
        elif float(value) == 0.0:
            out.append((roles.NO_GRAPH_REG, lead, list(no_reg)))
        else:
            out.append((layout.graph_lambda_variant(value), lead, [f"method.graph_lambda={float(value)!r}"]))
    return out
