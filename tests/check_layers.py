"""The library's layers point one way. src/ holds one folder per layer; a
file may include its own folder's headers and those of the layers below it,
never above (docs/layout.md). This list is the order; a new folder joins it
where it belongs, or this test fails.

Usage: check_layers.py SRC_DIR"""
import os
import re
import sys

LAYERS = ["base", "driver", "jit", "engine", "vrows", "layout", "route", "check"]


def main():
    src = sys.argv[1]
    rank = {d: i for i, d in enumerate(LAYERS)}
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    problems = [f"src/{d}/ is not in check_layers.py's LAYERS" for d in folders if d not in rank]
    problems += [f"src/{d}/ is listed but missing" for d in LAYERS if d not in folders]
    loose = sorted(f for f in os.listdir(src) if f.endswith((".c", ".h")))
    problems += [f"src/{f} lies in no layer's folder" for f in loose]
    n = 0
    for d in folders:
        for f in sorted(os.listdir(os.path.join(src, d))):
            if not f.endswith((".c", ".h")):
                continue
            text = open(os.path.join(src, d, f), encoding="utf-8").read()
            for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                n += 1
                head = m.group(1).split("/")[0] if "/" in m.group(1) else d
                if head in rank and d in rank and rank[head] > rank[d]:
                    problems.append(f"src/{d}/{f} includes {m.group(1)}: {head} is above {d}")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"{n} includes in {len(folders)} layers, none pointing up: {' < '.join(LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
