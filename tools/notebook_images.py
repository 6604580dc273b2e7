"""Each lesson's key picture, in its notebooks (both versions) and in ``images/``.

The package's diagram code (:mod:`mha_course.diagrams`) draws every picture into ``images/``. A
lesson shows one in a markdown cell, ``![alt text](attachment:NAME.png)``, and the cell carries
the file itself as an attachment (``cell.attachments = {"NAME.png": {"image/png": base64}}``):
attachments render offline in JupyterLab, on Colab and on Binder, where a relative path would
depend on the notebook's folder. Stamping puts the file from ``images/`` and the picture's alt
text (declared beside its drawing code) into every cell that shows it; the check finds any
attachment that differs from ``images/``, and any picture a cell shows but does not carry.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

PNG = "image/png"
SHOWN = re.compile(r"!\[([^\]]*)\]\(attachment:([^)\s]+)\)")  # ![alt](attachment:NAME)


def pictures() -> dict[str, object]:
    """``{"NAME.png": Picture}`` for every picture the package draws."""
    from mha_course.diagrams import PICTURES

    return {picture.filename: picture for picture in PICTURES}


def draw(directory: Path) -> list[Path]:
    """Draw every picture into ``directory`` and remove any other PNG there, so that it holds
    exactly the pictures of the diagram code. Returns the files drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from mha_course.diagrams import build

    drawn = build(directory)
    for stale in set(directory.glob("*.png")) - set(drawn):
        stale.unlink()
    return drawn


def _encoded(directory: Path, filename: str) -> str:
    return base64.b64encode((directory / filename).read_bytes()).decode("ascii")


def stamp_pictures(nb, directory: Path) -> bool:
    """Give every markdown cell that shows a picture of the package the file from ``directory``
    as its attachment, and the picture's alt text (a picture whose file is not there is left as
    it is). True when the notebook changed."""
    known = pictures()
    changed = False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        shown = [
            name
            for _, name in SHOWN.findall(cell.source)
            if name in known and (directory / name).exists()  # no file: the check says so
        ]
        if not shown:
            continue
        source = SHOWN.sub(
            lambda m: f"![{known[m[2]].alt}](attachment:{m[2]})" if m[2] in known else m[0],
            cell.source,
        )
        attachments = dict(cell.get("attachments", {}))
        attachments.update({name: {PNG: _encoded(directory, name)} for name in shown})
        if source != cell.source or attachments != cell.get("attachments"):
            cell.source, cell.attachments, changed = source, attachments, True
    return changed


def _attached_bytes(bundle) -> bytes | None:
    data = bundle.get(PNG)
    return None if data is None else base64.b64decode("".join(data))


def picture_problems(nb, label: str, directory: Path) -> list[str]:
    """What in ``nb`` (named ``label`` in the messages) disagrees with ``directory`` and the
    diagram code: a picture shown but not carried, an attachment shown by no link, one that is
    not in ``directory`` or differs from its file there, an alt text other than the picture's."""
    known = pictures()
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        where = f"{label}, cell {cell.get('id', index)}"
        shown = dict((name, alt) for alt, name in SHOWN.findall(cell.source))
        attachments = cell.get("attachments", {})
        for name, alt in shown.items():
            if name not in attachments:
                problems.append(f"{where}: shows attachment:{name} but carries no {name}")
            if name in known and alt != known[name].alt:
                problems.append(f"{where}: the alt text of {name} is not the picture's own")
        for name, bundle in attachments.items():
            file = directory / name
            if name not in shown:
                problems.append(f"{where}: carries {name} but shows it nowhere")
            elif name not in known:
                problems.append(f"{where}: carries {name}, which the diagram code does not draw")
            elif not file.exists():
                problems.append(f"{where}: carries {name}, but images/{name} is missing")
            elif _attached_bytes(bundle) != file.read_bytes():
                problems.append(f"{where}: {name} differs from images/{name}")
    return problems


def pictures_shown(nb) -> set[str]:
    """The file names of the pictures that ``nb``'s markdown cells show."""
    return {
        name
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for _, name in SHOWN.findall(cell.source)
    }


def placement_problems(nb, lesson: str, label: str) -> list[str]:
    """Lesson ``lesson``'s notebook ``nb`` must show exactly the pictures that the diagram code
    places in that lesson (``Picture.lessons``)."""
    expected = {name for name, picture in pictures().items() if lesson in picture.lessons}
    shown = pictures_shown(nb)
    return [
        f"{label}: does not show {name}, a picture of lesson {lesson}"
        for name in sorted(expected - shown)
    ] + [
        f"{label}: shows {name}, which the diagram code places in other lessons"
        for name in sorted(shown - expected)
        if name in pictures()
    ]
