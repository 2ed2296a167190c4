"""lib/ is layered (lib/CMakeLists.txt): a folder includes only itself and the folders below
it, so no library cycle can come back. This test reads every include, in every form (a
layer path, or a bare name resolved against the file's own folder and kernels/), so an
upward one is named even in a header no source includes yet. The order here is the CMake
list's. kernels/ sits beside ops: ops and the layers above include its headers bare
("cuda_ops.h"), and kernels/ itself includes only core."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "lib")
KERNELS = os.path.join(ROOT, "kernels")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
GENERATED = "ckv/"  # the build's generated directory (version.h, ruler_data.inc)


def layers():
    text = open(os.path.join(LIB, "CMakeLists.txt"), encoding="utf-8").read()
    return re.search(r"set\(CKV_LIB_LAYERS ([a-z ]+)\)", text).group(1).split()


def sources(folder):
    for name in sorted(os.listdir(folder)):
        if name.endswith((".h", ".cpp", ".cu", ".cuh")):
            yield name, open(os.path.join(folder, name), encoding="utf-8").read()


def test_every_folder_is_a_layer():
    folders = sorted(d for d in os.listdir(LIB) if os.path.isdir(os.path.join(LIB, d)))
    assert folders == sorted(layers())


def resolve(target, own_folder, order):
    """(layer, where) of an include: the layer it reaches, or None for kernels/ or generated."""
    if target.startswith(GENERATED):
        return "generated", None
    if "/" in target:
        top = target.split("/", 1)[0]
        if top in order and os.path.exists(os.path.join(LIB, target)):
            return "layer", top
        return "unknown", None
    if os.path.exists(os.path.join(own_folder, target)):
        return "same", None
    if os.path.exists(os.path.join(KERNELS, target)):
        return "kernels", None
    return "unknown", None


def test_includes_point_down():
    order = {name: i for i, name in enumerate(layers())}
    bad = []
    for layer in order:
        folder = os.path.join(LIB, layer)
        for name, text in sources(folder):
            for target in INCLUDE.findall(text):
                kind, top = resolve(target, folder, order)
                where = f"lib/{layer}/{name} includes \"{target}\""
                if kind == "layer" and order[top] > order[layer]:
                    bad.append(f"{where}: {top} is above {layer}")
                elif kind == "kernels" and order[layer] < order["ops"]:
                    bad.append(f"{where}: kernels/ sits at ops, above {layer}")
                elif kind == "unknown":
                    bad.append(f"{where}: not a file of lib/, kernels/ or this folder")
    assert not bad, "\n".join(bad)


def test_kernels_include_only_what_is_below_ops():
    order = {name: i for i, name in enumerate(layers())}
    bad = []
    for name, text in sources(KERNELS):
        for target in INCLUDE.findall(text):
            kind, top = resolve(target, KERNELS, order)
            if kind == "layer" and order[top] >= order["ops"]:
                bad.append(f"kernels/{name} includes \"{target}\": kernels/ sits at ops, {top} is not below it")
            elif kind == "unknown":
                bad.append(f"kernels/{name} includes \"{target}\": not a file of lib/ or kernels/")
    assert not bad, "\n".join(bad)


def test_the_check_catches_each_form(tmp_path):
    """The resolver itself: an upward include is caught with a layer path or bare."""
    order = {name: i for i, name in enumerate(layers())}
    assert resolve("model/forward.h", os.path.join(LIB, "io"), order) == ("layer", "model")
    assert resolve("forward.h", os.path.join(LIB, "model"), order) == ("same", None)
    assert resolve("forward.h", os.path.join(LIB, "io"), order) == ("unknown", None)
    assert resolve("op_math.h", os.path.join(LIB, "core"), order) == ("kernels", None)
    assert INCLUDE.findall('#  include "a/b.h"\n#include "c.h" // x\n') == ["a/b.h", "c.h"]
