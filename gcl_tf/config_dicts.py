"""Config dictionaries (``Config.to_dict()``, a saved config.yaml) by dotted key: flattened, without
some keys, and the keys in which two of them differ, said in one line (``--resume``, ``init_from``,
a search's or a suite's finished runs compare configs so)."""
from __future__ import annotations

import copy


def flat_keys(data: dict, prefix: str = "") -> dict:
    """A config dictionary's values by dotted key (``{"train.batch_size": 10, ...}``)."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def without_keys(data: dict, dotted_keys) -> dict:
    """A copy of a config dictionary without the ``dotted_keys`` (``"train.verbose"``; absent
    keys are no error)."""
    out = copy.deepcopy(data)
    for dotted in dotted_keys:
        *parents, key = str(dotted).split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(key, None)
    return out


def describe_differences(before: dict, after: dict, ignored=()) -> str:
    """The dotted keys whose values differ between two config dictionaries (nested or flat;
    ``ignored`` keys and sections left out), the first three as ``key (before -> after)`` in one
    line; "" when none differs."""
    def keep(key):
        return not any(key == k or key.startswith(k + ".") for k in ignored)

    a, b = flat_keys(before), flat_keys(after)
    keys = [k for k in dict.fromkeys(list(a) + list(b)) if keep(k)]
    shown = [f"{k} ({a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r})" for k in keys if a.get(k) != b.get(k)]
    return "; ".join(shown[:3]) + ("; ..." if len(shown) > 3 else "")
