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


def test_rooms_include_only_themselves_and_the_rooms_below():
    wrong = []
    for level, room in enumerate(ORDER):
        allowed = set(ORDER[: level + 1])
        for path in _sources(room):
            for inc in _includes(path):
                head = inc.split("/", 1)[0]
                if head in ORDER and head not in allowed:
                    wrong.append(f"{room}/{path.name} includes {inc}")
                if "/" not in inc and (inc.endswith(".hpp")) and not (SERVER / room / inc).exists():
                    wrong.append(f"{room}/{path.name} includes {inc}, not a file of its room")
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


def test_the_rule_check_sees_an_upward_include(tmp_path):
    # The check itself can fail: a core file that includes an edge header is caught.
    text = '#include "edge/service.hpp"\n'
    path = tmp_path / "x.cc"
    path.write_text(text)
    heads = [inc.split("/", 1)[0] for inc in _includes(path)]
    assert heads == ["edge"] and "edge" not in ORDER[:1]
