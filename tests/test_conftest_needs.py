"""The suite on a stranger's clone (conftest.py): a test that reads the lab's data mirror or the papers'
texts, directly or through a module constant, helper or fixture, is found, so it can be skipped with its reason."""

from conftest import _names_reading


def test_names_reading_the_mirror_are_found_through_constants_and_helpers(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text(
        "from conftest import MIRROR\n"
        "WIKI = MIRROR / 'wiki1m'\n"
        "SENTENCES = WIKI / 'head.txt'\n"
        "OTHER = 3\n"
        "def helper(folder=SENTENCES):\n    return folder\n"
        "def unrelated():\n    return OTHER\n"
    )
    reading = _names_reading(str(module), ("MIRROR",))
    assert {"MIRROR", "WIKI", "SENTENCES", "helper"} <= reading
    assert not {"OTHER", "unrelated"} & reading
