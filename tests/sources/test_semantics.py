import pytest

from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.schema import (IMAGENOME, SEMANTICS_ATTRIBUTES, SEMANTICS_OBJECTS, SEMANTICS_UMLS,
                                            release_path)
from ehrxqa_pipeline.sources.semantics import read_semantics

ATTRIBUTES_FILE = release_path(IMAGENOME, SEMANTICS_ATTRIBUTES)
OBJECTS_FILE = release_path(IMAGENOME, SEMANTICS_OBJECTS)
UMLS_FILE = release_path(IMAGENOME, SEMANTICS_UMLS)


def _error(root) -> SourceError:
    with pytest.raises(SourceError) as info:
        read_semantics(root)
    return info.value


def test_clean_semantics(source):
    sem = read_semantics(source.root)
    assert sem.objects == ["right lung", "left lung", "cardiac silhouette"]
    assert sem.attributes == [("anatomicalfinding", "yes", "lung opacity"), ("disease", "yes", "pneumonia"),
                              ("tubesandlines", "yes", "endotracheal tube")]
    assert sem.all_children == {"lung opacity": ["pneumonia"], "right lung": []}
    assert sem.possible_attribute_of["lung opacity"] == ["right lung", "left lung"]
    assert sem.raw["other"] == {"kept": True}


def test_bad_attribute_line_names_file_and_line(source):
    path = source.root / ATTRIBUTES_FILE
    path.write_text("anatomicalfinding|yes|lung opacity\n\nlung opacity only\n")
    err = _error(source.root)
    assert err.file == ATTRIBUTES_FILE and err.row == 3
    assert str(err).startswith(f"{ATTRIBUTES_FILE}: has a line that is not 'category|relation|attribute' "
                               "(line 3: 'lung opacity only'). Fix: ")


def test_empty_attribute_field(source):
    (source.root / ATTRIBUTES_FILE).write_text("disease||pneumonia\n")
    assert _error(source.root).row == 1


def test_missing_json_key(source):
    (source.root / UMLS_FILE).write_text('{"all_children": {}}')
    err = _error(source.root)
    assert err.file == UMLS_FILE and err.column == "possible_attribute_of"
    assert "has no key 'possible_attribute_of'" in str(err)


def test_json_value_of_wrong_shape(source):
    (source.root / UMLS_FILE).write_text('{"all_children": {"a": "b"}, "possible_attribute_of": {}}')
    assert "'all_children' entry 'a' is not a list of labels" in str(_error(source.root))


def test_invalid_json_names_line(source):
    (source.root / UMLS_FILE).write_text('{\n "all_children": {}\n "possible_attribute_of": {}\n}')
    err = _error(source.root)
    assert err.row == 3 and "is not valid JSON" in str(err) and "(line 3)" in str(err)


def test_missing_objects_file(source):
    (source.root / OBJECTS_FILE).unlink()
    err = _error(source.root)
    assert err.file == OBJECTS_FILE and "file not found" in str(err)
    assert "semantics/" in err.fix
