"""The arm palette shared by the HTML report and the progress page: distinct however many arms."""

from __future__ import annotations

import colorsys

# Matplotlib's tab10: distinct, and distinguishable by most colour-blind readers.
BASE_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
GOLDEN_ANGLE = 137.50776405  # degrees: successive hues stay far apart however many are drawn
FIRST_HUE = 240.0  # violet-blue, the widest gap between the base colours' hues

def palette(count: int) -> list[str]:
    """``count`` distinct colours: the base ten, then hues stepped by the
    golden angle, alternating lightness."""
    colors = list(BASE_COLORS[:count])
    for i in range(len(colors), count):
        hue = (FIRST_HUE + (i - len(BASE_COLORS)) * GOLDEN_ANGLE) % 360 / 360
        lightness = 0.38 if i % 2 else 0.52  # neighbours in hue also differ in lightness
        r, g, b = colorsys.hls_to_rgb(hue, lightness, 0.75)
        colors.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return colors
