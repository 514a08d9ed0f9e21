"""The figures quoted in the repository's Markdown, each generated from the result file it comes from.

A quoted block sits in a Markdown file between two comment lines,

    <!-- figures: NAME -->
    ...generated text...
    <!-- /figures: NAME -->

and NAME is registered here by a generator: a function of no arguments that reads its sources (paths
relative to the repository root) and returns the block's text. scripts/figures checks every block
against its generator, rewrites them (--write) and proves the check can fail (--planted). The modules
of this package hold the generators, one module per topic; `blocks()` imports them all.
"""
import importlib
import json
import os
import pkgutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_REGISTRY = {}


class Block:
    def __init__(self, name, sources, fn):
        self.name, self.sources, self.fn = name, sources, fn

    def text(self):
        missing = [s for s in self.sources if not os.path.exists(path(s))]
        if missing:
            raise FileNotFoundError(f"figures block '{self.name}': source {missing[0]} does not exist")
        return self.fn().rstrip("\n")


def block(name, *sources):
    """Registers the decorated generator as the block NAME, generated from SOURCES."""
    def register(fn):
        if name in _REGISTRY:
            raise ValueError(f"figures block '{name}' registered twice")
        _REGISTRY[name] = Block(name, list(sources), fn)
        return fn
    return register


def blocks():
    """Every registered block, by name (imports every module of the package once)."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return dict(_REGISTRY)


# ---- helpers for generators ------------------------------------------------------------------------

def path(rel):
    return os.path.join(ROOT, rel)


def read(rel):
    with open(path(rel)) as fh:
        return fh.read()


def load_json(rel):
    with open(path(rel)) as fh:
        return json.load(fh)


def md_tables(rel):
    """Every Markdown table in the file: a list of (header cells, body rows of cells), stripped."""
    tables, group = [], []
    for line in read(rel).splitlines() + [""]:
        if line.strip().startswith("|"):
            group.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if len(group) >= 2 and all(set(c) <= set("-: ") for c in group[1]):
            tables.append((group[0], group[2:]))
        group = []
    return tables


def md_rows(rel, first_cell=None):
    """The body rows of every Markdown table in the file (with first_cell: those whose first cell is it)."""
    return [r for _, body in md_tables(rel) for r in body if first_cell is None or r[0] == first_cell]


def table(header, rows):
    """A Markdown table: header cells, then rows of cells (converted with str)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def span(values, fmt="{:.2f}", sep="-"):
    """'lo-hi' of the values in the format (one value when they round alike)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}{sep}{hi}"
