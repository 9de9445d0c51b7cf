"""Strict JSON extraction: exact accepted forms and the errors sent back to the model."""

import pytest

from sae_workbench.llm.jsonparse import (
    JSONParseError,
    as_int_list,
    as_object,
    as_str_list,
    extract_json,
    parse_json_strict,
    strip_fence,
)


def test_parse_json_strict_accepts_plain_and_fenced():
    assert parse_json_strict(' {"a": [1, 2]} \n') == {"a": [1, 2]}
    assert parse_json_strict('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_strict("```\n[1, 2]\n```") == [1, 2]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ('Sure! {"a": 1}', "Expecting value at line 1 column 1"),
        ('{"a": 1,}', "line 1 column 9"),
        ("{'a': 1}", "Expecting property name"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": 1} trailing', "Extra data"),
    ],
)
def test_parse_json_strict_rejects_with_a_useful_message(text, fragment):
    with pytest.raises(JSONParseError, match=fragment):
        parse_json_strict(text)


def test_json_parse_error_is_a_value_error():
    # The client re-asks on ValueError, so parse functions built on these helpers get re-asks for free.
    assert issubclass(JSONParseError, ValueError)


def test_extract_json_after_marker():
    text = 'IMPROVEMENT: add "cat".\nNEW EXPLANATION: [{"activates_on": "cat", "strength": 4}] thanks'
    assert extract_json(text, after="NEW EXPLANATION:") == [{"activates_on": "cat", "strength": 4}]
    # Without the marker the first bracket wins — here inside the improvement text there is none.
    assert extract_json('x {"k": "v"} y [1]') == {"k": "v"}


def test_extract_json_errors():
    with pytest.raises(JSONParseError, match="no 'NEW EXPLANATION:' marker"):
        extract_json("[1]", after="NEW EXPLANATION:")
    with pytest.raises(JSONParseError, match="no JSON object or array"):
        extract_json("NEW EXPLANATION: none", after="NEW EXPLANATION:")
    with pytest.raises(JSONParseError, match="invalid JSON"):
        extract_json('NEW EXPLANATION: [{"a": 1', after="NEW EXPLANATION:")


def test_strip_fence_only_strips_one_enclosing_fence():
    assert strip_fence("  ```json\n[1]\n```  ") == "[1]"
    assert strip_fence("text ```[1]```") == "text ```[1]```"


def test_shape_checkers():
    assert as_object({"a": 1, "b": 2}, ("a",)) == {"a": 1, "b": 2}
    with pytest.raises(JSONParseError, match="missing key\\(s\\): b"):
        as_object({"a": 1}, ("a", "b"))
    with pytest.raises(JSONParseError, match="expected a JSON object, got list"):
        as_object([1])
    assert as_int_list([0, 5, 3], length=3, lo=0, hi=5) == [0, 5, 3]
    with pytest.raises(JSONParseError, match="expected exactly 3 items, got 2"):
        as_int_list([1, 2], length=3)
    with pytest.raises(JSONParseError, match="item 1 is 6, expected an integer in \\[0, 5\\]"):
        as_int_list([1, 6], lo=0, hi=5)
    with pytest.raises(JSONParseError, match="item 0 is True"):
        as_int_list([True])
    with pytest.raises(JSONParseError, match=r"item 0 is 1\.5"):
        as_int_list([1.5])
    assert as_str_list(["a", "b"], length=2) == ["a", "b"]
    with pytest.raises(JSONParseError, match="item 1 is 2"):
        as_str_list(["a", 2])
