#!/usr/bin/python3
"""`objectcache report --quick` looked at as a person would: headless Chromium renders its page.

  report_test.py --objectcache BINARY --out OUT_DIR [--existing]

Runs the quick report into OUT_DIR (kept, with the rendered page.png, so a developer can open
them), or with --existing checks the report already there. It fails when a figure is missing,
when a figure's plot draws nothing, when a figure's JSON lacks what it must say, when the page
asks the browser for anything outside itself, when Chromium reports an error, or when the
rendered page is blank, or when the run removed a file of the user's in OUT_DIR or left its own
scratch directory there. No duration is asserted.
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402

FIGURES = ["motivation", "fig4", "fig8", "fig10", "fig11", "fig12", "fig13", "fig14", "fig16", "model", "nvme-kv",
           "tls"]
FIELDS = ["id", "title", "paper", "ours", "baseline", "holds", "machine", "data"]
SERIES_BLUE = (0x4c, 0x72, 0xb0)  # the first series' colour in every chart


class Figures(html.parser.HTMLParser):
    """Per figure section: its SVGs, and in each the marks that draw data."""

    def __init__(self):
        super().__init__()
        self.figures = {}  # id -> [marks per svg]
        self.section = None
        self.external = []  # src/href attributes pointing outside the page

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name in ("src", "href"):
            if name in a and not a[name].startswith("#"):
                self.external.append((tag, a[name]))
        if tag == "link" or tag == "script":
            self.external.append((tag, a))
        if tag == "section" and a.get("class") == "figure":
            self.section = a["id"]
            self.figures[self.section] = []
        elif self.section is None:
            return
        elif tag == "svg":
            self.figures[self.section].append(0)
        elif self.figures[self.section]:
            width = a.get("width", "0")
            if tag == "rect" and not width.endswith("%") and float(width) > 0 \
                    and float(width) != 12 and a.get("fill", "white") != "white":
                self.figures[self.section][-1] += 1  # a bar or a cell (legend swatches are 12)
            elif tag == "circle":
                self.figures[self.section][-1] += 1  # a line chart's point

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None


def check_report(out):
    for name in ["index.html", "report.md"] + [f + ".json" for f in FIGURES]:
        assert os.path.isfile(os.path.join(out, name)), "missing " + name
    for f in FIGURES:
        j = json.load(open(os.path.join(out, f + ".json")))
        for field in FIELDS:
            assert j.get(field) not in (None, "", {}, []), (f, field, j.get(field))
    page = open(os.path.join(out, "index.html")).read()
    parser = Figures()
    parser.feed(page)
    assert not parser.external, "the page fetches from outside itself: %s" % parser.external
    for f in FIGURES:
        assert f in parser.figures, "figure %s is not on the page" % f
        marks = parser.figures[f]
        assert marks, "figure %s has no plot" % f
        assert all(m >= 2 for m in marks), "a plot of figure %s draws nothing: %s" % (f, marks)
    check_markdown(os.path.join(out, "report.md"))
    return len(parser.figures)


def check_markdown(path):
    """Every plot the Markdown links is there, relative to the Markdown file."""
    md = open(path).read()
    svgs = re.findall(r"\]\(([^)]+\.svg)\)", md)
    assert len(svgs) >= len(FIGURES), "%s links %d plots" % (path, len(svgs))
    for svg in svgs:
        where = os.path.join(os.path.dirname(path), svg)
        assert os.path.isfile(where), "%s names a missing %s" % (path, svg)


def render(out):
    browser = shutil.which("chromium")
    assert browser, "chromium is not installed (scripts/install-deps installs it)"
    png = os.path.join(out, "page.png")
    if os.path.exists(png):
        os.remove(png)
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--enable-logging=stderr", "--v=0", "--user-data-dir=" + os.path.join(out, ".chromium")]
    url = "file://" + os.path.abspath(os.path.join(out, "index.html"))
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    for f in FIGURES:
        assert 'id="%s"' % f in dom.stdout, "the browser did not see figure " + f
    shot = subprocess.run(flags + ["--window-size=1100,14000", "--screenshot=" + png, url],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and os.path.isfile(png), shot.stderr
    for log in (dom.stderr, shot.stderr):
        for line in log.splitlines():
            # The page's own errors (console, loads); D-Bus and GPU chatter of a headless
            # browser in a container is not about the page.
            assert not re.search(r"CONSOLE|Failed to load|Uncaught|net::ERR_", line), line
    image = Image.open(png).convert("RGB")
    width, height = image.size
    small = image.resize((width // 4, height // 4))
    pixels = list(small.getdata())
    ink = sum(1 for p in pixels if p != (255, 255, 255))
    assert ink > 0.01 * len(pixels), "the rendered page is nearly blank"
    blue = sum(1 for p in pixels if all(abs(c - s) < 24 for c, s in zip(p, SERIES_BLUE)))
    assert blue > 50, "no plotted series shows in the rendered page"
    return png


def main():
    p = argument_parser()
    p.add_argument("--out", required=True, help="the report's directory (kept)")
    p.add_argument("--existing", action="store_true", help="check the report already in --out")
    args = p.parse_args()
    binary, out = args.objectcache, args.out
    if not args.existing:
        if os.path.isdir(out):
            shutil.rmtree(out)
        # A file of the user's in OUT_DIR, where the report keeps its experiments' stores: it
        # stays, and the report leaves no scratch directory of its own behind.
        users = os.path.join(out, "scratch", "notes.txt")
        os.makedirs(os.path.dirname(users))
        with open(users, "w") as f:
            f.write("the user's\n")
        # The Markdown copy beside the directory, as docs/results.md is beside docs/results.
        run = subprocess.run([binary, "report", "--quick", "--out", out,
                              "--markdown", out.rstrip("/") + ".md"],
                             capture_output=True, text=True, timeout=900)
        print(run.stdout)
        print(run.stderr[-4000:])
        assert run.returncode == 0, "objectcache report failed"
        assert open(users).read() == "the user's\n"
        left = [n for n in os.listdir(out) if n.startswith("scratch")]
        assert left == ["scratch"], left
        shutil.rmtree(os.path.dirname(users))
    n = check_report(out)
    if os.path.isfile(out.rstrip("/") + ".md"):
        check_markdown(out.rstrip("/") + ".md")
    png = render(out)
    print("ok: %d figures, rendered to %s" % (n, png))


if __name__ == "__main__":
    main()
