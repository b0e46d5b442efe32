"""The methods' colours and markers, the same in every figure of every suite: a registered method's
are its class's ``style``; any other name drawn gets its own besides them."""
from __future__ import annotations

from gcl_tf import methods
from gcl_tf.benchmark.layout import method_sort_key

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d", "8", "H")


def registered_styles() -> dict[str, tuple]:
    """``{method: (colour, marker)}`` of the registered methods, as each class declares its
    ``style`` (gcl_tf/methods/hooks.py), in the registry's order."""
    classes = {name: methods.method_class(name) for name in methods.names()}
    return {name: tuple(cls.style) for name, cls in classes.items() if cls.style is not None}


def fallback_colours(count: int, registered: dict) -> list[str]:
    """``count`` distinct colours for names outside ``registered`` (:func:`registered_styles`),
    none of its colours: tab20's light shades, then hues evenly spaced around the colour wheel."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    taken = {colour for colour, _ in registered.values()}
    light = [to_hex(colormaps["tab20"](i)) for i in range(1, 20, 2)]
    if count <= len(light):
        return light[:count]
    hues = [to_hex(colormaps["hsv"](i / (count + len(taken)))) for i in range(count + len(taken))]
    return light + [c for c in hues if c not in taken and c not in light][:count - len(light)]


def fallback_marker(index: int, registered: dict):
    """The ``index``-th marker for names outside ``registered``: MARKERS that it does not use,
    then regular star polygons of more and more points."""
    free = [m for m in MARKERS if m not in {shape for _, shape in registered.values()}]
    return free[index] if index < len(free) else (index - len(free) + 5, 1, 0)


def method_styles(names) -> dict[str, tuple]:
    """``{method: (colour, marker)}``, each method its own colour and its own marker: a registered
    method its class's ``style``, whatever else a suite draws (the same in every figure); other
    names (a method outside the registry, a study variant such as ``er-memory100``) a colour and
    marker of their own besides those, in sorted order."""
    names, registered = set(names), registered_styles()
    styles = {name: registered[name] for name in names if name in registered}
    others = sorted(names - set(registered), key=method_sort_key)
    for i, (name, colour) in enumerate(zip(others, fallback_colours(len(others), registered))):
        styles[name] = (colour, fallback_marker(i, registered))
    return styles
