"""A figure as SVG with the same bytes for the same input, so that a folder of charts redrawn from
the same CSVs shows no change in git."""
from __future__ import annotations

import io
import re
from pathlib import Path


# matplotlib names each clip path after a hash of its exact float bounds, and the constrained
# layout's solver can differ in the last bits between runs when a header has a legend: the
# same chart would get other ids (the coordinates written, rounded, are the same).
CLIP_ID = re.compile(r'(?<=url\(#)p[0-9a-f]{10}(?=\))|(?<=<clipPath id=")p[0-9a-f]{10}(?=")')


def stable_clip_ids(svg: str) -> str:
    """The SVG with its clip path ids numbered in order of first use: clip1, clip2, ..."""
    ids: dict[str, str] = {}
    return CLIP_ID.sub(lambda m: ids.setdefault(m.group(0), f"clip{len(ids) + 1}"), svg)


def write_svg(fig, path: Path) -> None:
    """The figure as SVG, the same bytes for the same input (no date, stable ids)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    path.write_text(stable_clip_ids(buffer.getvalue()), encoding="utf-8")
