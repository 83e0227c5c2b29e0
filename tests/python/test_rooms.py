"""The server's rooms and their include rules (server/CMakeLists.txt names them).

Each room of server/ includes only its own headers and those of the rooms below it, so
dependencies run one way; server/ includes nothing from client/. A header of another room is
always included by room ("core/status.hpp"), so a bare name would be a file of the same room.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
# Bottom up: a room may include the rooms before it in this list.
ORDER = ["core", "datasets", "observability", "scheduling", "edge", "lifecycle"]
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]', re.M)


def _includes(path):
    return INCLUDE.findall(path.read_text())


def _sources(room):
    return sorted(p for p in (SERVER / room).iterdir() if p.suffix in (".cc", ".hpp"))


def test_every_server_source_sits_in_a_room():
    loose = [p.name for p in SERVER.iterdir() if p.suffix in (".cc", ".hpp")]
    assert loose == [], f"server/ files outside a room: {loose}"
    rooms = sorted(p.name for p in SERVER.iterdir() if p.is_dir() and p.name != "tools")
    assert rooms == sorted(ORDER)


def _violations(room, path, room_dir):
    """The includes of `path` (a file of `room`) that break the rule."""
    allowed = set(ORDER[: ORDER.index(room) + 1])
    wrong = []
    for inc in _includes(path):
        head = inc.split("/", 1)[0]
        if head in ORDER and head not in allowed:
            wrong.append(f"{room}/{path.name} includes {inc}")
        if "/" not in inc and inc.endswith(".hpp") and not (room_dir / inc).exists():
            wrong.append(f"{room}/{path.name} includes {inc}, not a file of its room")
    return wrong


def test_rooms_include_only_themselves_and_the_rooms_below():
    wrong = [w for room in ORDER for path in _sources(room)
             for w in _violations(room, path, SERVER / room)]
    assert wrong == [], "\n".join(wrong)


def test_server_includes_nothing_from_client():
    hits = [
        f"{p.relative_to(ROOT)}: {inc}"
        for p in SERVER.rglob("*")
        if p.suffix in (".cc", ".hpp")
        for inc in _includes(p)
        if inc.startswith("gpusampler/client")
    ]
    assert hits == [], hits


def test_the_rule_check_sees_an_upward_include_and_a_bare_foreign_name(tmp_path):
    # The check itself can fail: a core file including an edge header, or another room's
    # header by its bare name, is caught; a lifecycle file may include any room.
    path = tmp_path / "x.cc"
    path.write_text('#include "edge/service.hpp"\n#include "status.hpp"\n')
    assert len(_violations("core", path, tmp_path)) == 2
    path.write_text('#include "edge/service.hpp"\n#include "core/status.hpp"\n')
    assert _violations("lifecycle", path, tmp_path) == []


# --- kernels/src: its rooms and their one-way include rule (docs/architecture.md, "kernels/").
# Every file of kernels/src sits in a room; a room includes the public headers
# (gpusampler/kernels/...), its own files and the rooms named for it here, always by room
# ("pipeline/params.hpp"). Nothing outside cuda/ includes a .cuh (nvcc-only) header; sim/ takes
# from cuda/ only its host-compilable policy headers (.hpp). Nothing includes launch/.
KERNELS_SRC = ROOT / "kernels" / "src"
KERNELS_PUBLIC = ROOT / "kernels" / "include"
KERNEL_ROOMS = {
    "cpu": {"cpu"},
    "pipeline": {"pipeline"},
    "device": {"device"},
    "cuda": {"cuda", "pipeline", "device"},
    "sim": {"sim", "pipeline", "device", "cuda"},
    "launch": {"launch", "pipeline"},
}
KERNEL_SUFFIXES = (".cc", ".hpp", ".cu", ".cuh")


def _kernel_sources(room):
    return sorted(p for p in (KERNELS_SRC / room).rglob("*") if p.suffix in KERNEL_SUFFIXES)


def test_every_kernels_source_sits_in_a_room():
    loose = sorted(p.name for p in KERNELS_SRC.iterdir() if p.is_file())
    assert loose == [], f"kernels/src files outside a room: {loose}"
    rooms = sorted(p.name for p in KERNELS_SRC.iterdir() if p.is_dir())
    assert rooms == sorted(KERNEL_ROOMS)


def _kernel_violations(room, path, room_dir):
    """The includes of `path` (a file of kernels room `room`) that break the rule."""
    wrong = []
    for inc in _includes(path):
        head = inc.split("/", 1)[0]
        if head in KERNEL_ROOMS and head not in KERNEL_ROOMS[room]:
            wrong.append(f"{room}/{path.name} includes {inc}")
        if inc.endswith(".cuh") and room != "cuda":
            wrong.append(f"{room}/{path.name} includes {inc}, an nvcc-only header")
        if "/" not in inc and inc.endswith((".hpp", ".cuh")) and not (room_dir / inc).exists():
            wrong.append(f"{room}/{path.name} includes {inc}, not by room")
    return wrong


def test_kernels_rooms_include_one_way():
    wrong = [w for room in KERNEL_ROOMS for path in _kernel_sources(room)
             for w in _kernel_violations(room, path, KERNELS_SRC / room)]
    assert wrong == [], "\n".join(wrong)


def test_kernels_public_headers_include_only_public_headers():
    wrong = [
        f"{p.relative_to(ROOT)}: {inc}"
        for p in KERNELS_PUBLIC.rglob("*.hpp")
        for inc in _includes(p)
        if inc.split("/", 1)[0] in KERNEL_ROOMS or (inc.endswith(".hpp") and "/" not in inc)
    ]
    assert wrong == [], wrong


def test_the_kernels_rule_check_sees_a_wrong_way_include(tmp_path):
    # The check itself can fail: cpu/ including the pipeline, pipeline/ including launch/ or a
    # .cuh, and a bare name that is not a file of the room are caught; launch/ may include
    # the pipeline.
    path = tmp_path / "x.cc"
    path.write_text('#include "pipeline/params.hpp"\n#include "cuda/error.cuh"\n')
    assert len(_kernel_violations("cpu", path, tmp_path)) == 3
    path.write_text('#include "launch/plan.hpp"\n#include "params.hpp"\n')
    assert len(_kernel_violations("pipeline", path, tmp_path)) == 2
    path.write_text('#include "pipeline/params.hpp"\n#include "launch/plan.hpp"\n')
    assert _kernel_violations("launch", path, tmp_path) == []
