"""The look shared by the StateFlow plots: colours, fonts, saving.

What it is for: one place for the colour of a pass and chunk, the colour of a
buffer class, the fitting of a label into a box, and writing a figure file.
What it is not: a plot (see plot_gantt, plot_memory, plot_sweep).

    color = pass_color("F", chunk=2, n_chunks=4)    # a mid blue
    save(fig, "out/gantt.png", dpi=110)
"""

import matplotlib

matplotlib.use("Agg")   # files only; no display needed or wanted

import functools                                        # noqa: E402

from matplotlib import colormaps                        # noqa: E402
from matplotlib.font_manager import FontProperties      # noqa: E402
from matplotlib.textpath import TextToPath              # noqa: E402
import matplotlib.pyplot as plt                         # noqa: E402

# Colour families per pass: forward blue, backward red-orange, weight-gradient
# green. The chunk position along the sequence sets the intensity, light for
# the first chunk, dark for the last.
_PASS_MAPS = {"F": "Blues", "B": "OrRd", "W": "Greens"}
_LIGHTEST, _DARKEST = 0.32, 0.88

CLASS_COLORS = {
    "weights": "#6b7b8c",
    "gradients": "#98a6b3",
    "optimizer_state": "#c9d2da",
    "activations": "#3b75af",
    "boundary_states": "#8e5ea2",
    "kv_buffers": "#2a9d8f",
    "logits": "#e9a23b",
    "workspace": "#d1605e",
}
CLASS_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "stored activations",
    "boundary_states": "boundary states",
    "kv_buffers": "K/V buffers",
    "logits": "logits",
    "workspace": "workspace",
}
IDLE_COLOR = "#eeeeee"
CAPACITY_COLOR = "#c0392b"
BASELINE_COLOR = "#555555"
INK = "#222222"


def setup():
    """Fonts and spines for every figure (call once before drawing)."""
    plt.rcParams.update({
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
        "savefig.facecolor": "white",
    })


def pass_color(pass_, chunk, n_chunks):
    """RGBA of pass F/B/W for chunk 0..n_chunks-1 (intensity = position)."""
    cmap = colormaps[_PASS_MAPS.get(pass_, "Greys")]
    if n_chunks <= 1:
        level = 0.62
    else:
        level = _LIGHTEST + (_DARKEST - _LIGHTEST) * chunk / (n_chunks - 1)
    return cmap(level)


def text_color(rgba):
    """Dark ink on light boxes, white on dark ones (relative luminance)."""
    r, g, b = rgba[:3]
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return INK if luminance > 0.55 else "white"


@functools.lru_cache(maxsize=4096)
def text_width_pt(text, fontsize_pt):
    """Width in points of one line of `text` in the default font."""
    width, _, _ = TextToPath().get_text_width_height_descent(
        text, FontProperties(size=fontsize_pt), ismath=False)
    return width


def title(fig, left, right, text, context=""):
    """A bold title at the top left of `fig` and, in grey at the top right,
    the context (scenario, model, ...); left and right in figure fractions.
    When both do not fit on one line, the context goes under the title."""
    height = fig.get_figheight()
    y = 1 - 0.12 / height
    fig.text(left, y, text, ha="left", va="top", fontsize=12,
             fontweight="bold", color=INK)
    if not context:
        return
    room_pt = (right - left) * fig.get_figwidth() * 72
    needed_pt = 1.1 * text_width_pt(text, 12) + text_width_pt(context, 9)
    if needed_pt + 18 <= room_pt:
        fig.text(right, y, context, ha="right", va="top", fontsize=9,
                 color="#666666")
    else:
        fig.text(left, y - 0.22 / height, context, ha="left", va="top",
                 fontsize=8, color="#666666")


def save(fig, out, dpi):
    """Writes `fig` to `out` (format from the extension) and closes it."""
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
