"""One table each, in three places that agree (issue 40, item 5): the variant's items in the
order trainbench writes them, and the words of the verdicts column, as the C++ lists them
(`trainbench --list_configs --json`: "variant_flags", "verdicts"), as the scripts hold them
(tbcsv.VARIANT_FLAGS, tbcsv.VERDICTS) and as results/SCHEMA.md's version 6 section documents
them. A flag or a verdict added to one fails here until the other two have it."""
import re

import pytest

from conftest import ROOT
from test_devices import list_configs

SCHEMA = ROOT / "results" / "SCHEMA.md"


def version_6_section() -> str:
    text = SCHEMA.read_text(encoding="utf-8")
    start = text.index("## Version 6")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def schema_variant_flags() -> list[str]:
    """The flags of the sentence listing the variant's items in order, in SCHEMA.md's version 6
    section (`optimizer`, `lr`, ...)."""
    section = version_6_section()
    m = re.search(r"The variant's items, in the order trainbench writes them[^:]*:(.*?)\.\s",
                  section, re.S)
    assert m, f"{SCHEMA}: no sentence 'The variant's items, in the order trainbench writes them ...:'"
    return re.findall(r"`([a-z0-9_]+)`", m.group(1))


def schema_verdicts() -> list[str]:
    """The words of the verdicts table in SCHEMA.md's version 6 section, in its order."""
    section = version_6_section()
    table = section[section.index("| word | meaning |"):]
    words = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        words += re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])
    return words


def test_the_variant_flags_are_one_table(tbcsv_mod):
    cpp = [f["name"] for f in list_configs()["variant_flags"]]
    assert cpp == list(tbcsv_mod.VARIANT_FLAGS), "scripts/tbdevices.py VARIANT_FLAGS"
    assert cpp == schema_variant_flags(), f"{SCHEMA}, version 6: the variant's items"
    # Each flag's meaning is documented where the C++ lists it.
    assert all(f["meaning"] for f in list_configs()["variant_flags"])


def test_the_verdicts_are_one_table(tbcsv_mod):
    cpp = [v["word"] for v in list_configs()["verdicts"]]
    assert cpp == list(tbcsv_mod.VERDICTS), "scripts/tbcsv.py VERDICTS"
    assert cpp == schema_verdicts(), f"{SCHEMA}, version 6: the table of verdicts"


@pytest.mark.parametrize("reader", [schema_variant_flags, schema_verdicts])
def test_the_schemas_tables_are_found(reader):
    """The readers of SCHEMA.md find something: an empty list would pass for nothing."""
    assert len(reader()) >= 7
