"""lib/ is layered (lib/CMakeLists.txt): a folder includes only itself and the folders below
it, so no library cycle can come back. The order here is the CMake list's."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "lib")


def layers():
    text = open(os.path.join(LIB, "CMakeLists.txt"), encoding="utf-8").read()
    return re.search(r"set\(CKV_LIB_LAYERS ([a-z ]+)\)", text).group(1).split()


def test_every_folder_is_a_layer():
    folders = sorted(d for d in os.listdir(LIB) if os.path.isdir(os.path.join(LIB, d)))
    assert folders == sorted(layers())


def test_includes_point_down():
    order = {name: i for i, name in enumerate(layers())}
    bad = []
    for layer in order:
        for name in sorted(os.listdir(os.path.join(LIB, layer))):
            if not name.endswith((".h", ".cpp")):
                continue
            text = open(os.path.join(LIB, layer, name), encoding="utf-8").read()
            for target in re.findall(r'^#include "([a-z_]+)/', text, re.M):
                if target in order and order[target] > order[layer]:
                    bad.append(f"lib/{layer}/{name} includes {target}/")
    assert not bad, "\n".join(bad)
