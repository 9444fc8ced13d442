#!/usr/bin/python3
"""Render a tmux capture with colours (`tmux capture-pane -p -e`) to a PNG.

Usage: render.py CAPTURE.ansi OUT.png [COLUMNS ROWS]

Feeds the capture to pyte (a terminal emulator) and draws each cell with
Pillow in DejaVu Sans Mono. Debian: python3-pyte python3-pil fonts-dejavu-core.
"""
import sys

import pyte
from PIL import Image, ImageDraw, ImageFont

ANSI = {
    "black": (0, 0, 0), "red": (205, 49, 49), "green": (13, 188, 121),
    "brown": (229, 229, 16), "blue": (36, 114, 200), "magenta": (188, 63, 188),
    "cyan": (17, 168, 205), "white": (229, 229, 229),
    "brightblack": (118, 118, 118), "brightred": (241, 76, 76),
    "brightgreen": (35, 209, 139), "brightbrown": (245, 245, 67),
    "brightblue": (59, 142, 234), "brightmagenta": (214, 112, 214),
    "brightcyan": (41, 184, 219), "brightwhite": (255, 255, 255),
}
FG, BG = (204, 204, 204), (24, 24, 24)


def colour(name, default):
    if name == "default":
        return default
    if name in ANSI:
        return ANSI[name]
    if len(name) == 6:
        return tuple(int(name[i:i + 2], 16) for i in (0, 2, 4))
    return default


def main():
    capture, out = sys.argv[1], sys.argv[2]
    columns = int(sys.argv[3]) if len(sys.argv) > 3 else 120
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    screen = pyte.Screen(columns, rows)
    stream = pyte.Stream(screen)
    text = open(capture, encoding="utf-8").read()
    stream.feed(text.rstrip("\n").replace("\n", "\r\n"))
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", 12)
    bold = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf", 12)
    # The mono face lacks the braille block; DejaVu Sans has it.
    braille = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 12)
    cell_w, cell_h = 7, 15
    image = Image.new("RGB", (columns * cell_w, rows * cell_h), BG)
    draw = ImageDraw.Draw(image)
    for y in range(rows):
        line = screen.buffer[y]
        for x in range(columns):
            char = line[x]
            fg, bg = colour(char.fg, FG), colour(char.bg, BG)
            if char.reverse:
                fg, bg = bg, fg
            if bg != BG:
                draw.rectangle([x * cell_w, y * cell_h, (x + 1) * cell_w - 1, (y + 1) * cell_h - 1], fill=bg)
            if char.data.strip():
                face = braille if "\u2800" <= char.data <= "\u28ff" else (bold if char.bold else font)
                draw.text((x * cell_w, y * cell_h), char.data, fill=fg, font=face)
    image.save(out, optimize=True)


if __name__ == "__main__":
    main()
