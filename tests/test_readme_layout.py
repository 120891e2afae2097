"""The README's Layout is where a new engineer finds a module: it names every module of both packages."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layout_section() -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index("\n## Layout\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end != -1 else None]


def test_the_layout_names_every_module_of_both_packages():
    layout = layout_section()
    modules = [p for package in ("meddevkg_core", "meddevkg_dagster") for p in (REPO / package).glob("*.py")
               if p.name != "__init__.py"]
    assert len(modules) > 50
    assert [f"{p.parent.name}/{p.name}" for p in modules if p.name not in layout] == []
