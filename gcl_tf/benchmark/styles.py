"""The methods' colours and markers, the same in every figure of every suite."""
from __future__ import annotations

from gcl_tf.benchmark.layout import method_sort_key

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d", "8", "H")

METHOD_STYLES = {  # (colour, marker) of every registered method, the same in every figure of every suite
    "finetune": ("#7f7f7f", "o"),  # grey: the lower bound
    "ewc": ("#1f77b4", "s"),
    "icarl": ("#ff7f0e", "^"),
    "gem": ("#2ca02c", "D"),
    "agem": ("#9467bd", "v"),
    "er": ("#8c564b", "P"),
    "mer": ("#e377c2", "X"),
    "derpp": ("#bcbd22", "<"),
    "er_ace": ("#17becf", ">"),
    "mir": ("#393b79", "h"),
    "onpro": ("#637939", "p"),
    "gcl": ("#d62728", "*"),  # red: the paper's method
}


def fallback_colours(count: int) -> list[str]:
    """``count`` distinct colours for names outside METHOD_STYLES, none of its colours: tab20's
    light shades, then hues evenly spaced around the colour wheel."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    taken = {colour for colour, _ in METHOD_STYLES.values()}
    light = [to_hex(colormaps["tab20"](i)) for i in range(1, 20, 2)]
    if count <= len(light):
        return light[:count]
    hues = [to_hex(colormaps["hsv"](i / (count + len(taken)))) for i in range(count + len(taken))]
    return light + [c for c in hues if c not in taken and c not in light][:count - len(light)]


def fallback_marker(index: int):
    """The ``index``-th marker for names outside METHOD_STYLES: MARKERS that it does not use,
    then regular star polygons of more and more points."""
    free = [m for m in MARKERS if m not in {shape for _, shape in METHOD_STYLES.values()}]
    return free[index] if index < len(free) else (index - len(free) + 5, 1, 0)


def method_styles(names) -> dict[str, tuple]:
    """``{method: (colour, marker)}``, each method its own colour and its own marker: a registered
    method its METHOD_STYLES entry, whatever else a suite draws (GCL red with a star in every
    figure); other names (a method outside the registry, a study variant such as
    ``gcl-memory100``) a colour and marker of their own besides those, in sorted order."""
    names = set(names)
    styles = {name: METHOD_STYLES[name] for name in names if name in METHOD_STYLES}
    others = sorted(names - set(METHOD_STYLES), key=method_sort_key)
    for i, (name, colour) in enumerate(zip(others, fallback_colours(len(others)))):
        styles[name] = (colour, fallback_marker(i))
    return styles
