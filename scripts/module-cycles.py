#!/usr/bin/env python3
"""Lists the import cycles between the modules of each crate given (default: every crate
under host/): a module that reaches, through `crate::` paths, a module that reaches it back.

    python3 scripts/module-cycles.py [CRATE_DIR ...]     # EDGES=1 also prints the edges

It reads `crate::a::b` paths and `use crate::{a, b}` lists, ignores comments and the unit
tests at a file's tail (after `#[cfg(test)]`), and counts edges between a crate's modules
only (not to its root). Prints one line per cycle; exits 1 if there is any.
"""

import glob
import os
import re
import sys


def modules(crate):
    """Module path (`a::b`) -> source text, without its unit tests."""
    src = os.path.join(crate, "src")
    found = {}
    for path in glob.glob(src + "/**/*.rs", recursive=True):
        parts = os.path.relpath(path, src)[:-3].split("/")
        if parts in (["lib"], ["main"]):
            continue
        if parts[-1] == "mod":
            parts = parts[:-1]
        with open(path) as f:
            text = f.read()
        cut = text.find("#[cfg(test)]")
        found["::".join(parts)] = text if cut < 0 else text[:cut]
    return found


def edges(mods):
    """Module -> the modules it names."""
    names = set(mods)
    graph = {name: set() for name in names}
    for name, text in mods.items():
        text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
            path = m.group(1).split("::")
            for k in range(len(path), 0, -1):
                target = "::".join(path[:k])
                if target in names:
                    if target != name:
                        graph[name].add(target)
                    break
        for m in re.finditer(r"use crate::\{([^;]*)\};", text, re.S):
            for item in re.split(r"[,\s{}]+", m.group(1)):
                head = item.split("::")[0]
                if head in names and head != name:
                    graph[name].add(head)
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    crates = sys.argv[1:] or sorted(glob.glob(os.path.join(root, "host", "*", "")))
    found = 0
    for crate in crates:
        graph = edges(modules(crate))
        for component in cycles(graph):
            found += 1
            name = os.path.basename(os.path.normpath(crate))
            print(f"{name}: {len(component)} modules: {' '.join(component)}")
            if os.environ.get("EDGES"):
                members = set(component)
                for module in component:
                    print(f"  {module} -> {' '.join(sorted(graph[module] & members))}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
