"""Golden tests of the scorers' prompts: exact text and version constants."""

from sae_workbench.evaluation.scorers.prompts.complexity import COMPLEXITY_PROMPT_VERSION, complexity_messages
from sae_workbench.evaluation.scorers.prompts.cosy import (
    COSY_PAPER_PROMPT_VERSION,
    COSY_PROMPT_VERSION,
    cosy_messages,
)
from sae_workbench.evaluation.scorers.prompts.detection import (
    DETECTION_PROMPT_VERSION,
    FUZZING_PROMPT_VERSION,
    detection_messages,
    fuzzing_messages,
    highlight,
)


def test_versions() -> None:
    assert DETECTION_PROMPT_VERSION == "detection-v1"
    assert FUZZING_PROMPT_VERSION == "fuzzing-v2"
    assert COSY_PROMPT_VERSION == "cosy-generator-v1"
    assert COSY_PAPER_PROMPT_VERSION == "cosy-generator-words-v1"
    assert COMPLEXITY_PROMPT_VERSION == "complexity-v1"


def test_detection_prompt_golden() -> None:
    _, user = detection_messages("dogs", ["a dog", "a cat"])
    assert user["content"] == (
        "Explanation of the feature: dogs\n\n"
        "Text 1:\na dog\n\nText 2:\na cat\n\n"
        "For each of the 2 texts, answer 1 if the feature fires somewhere in it and 0 if it does not.\n"
        "Reply with a JSON array of exactly 2 integers (0 or 1), in order, and nothing else."
    )


def test_fuzzing_prompt_and_highlight_golden() -> None:
    assert highlight(["a", " big", " dog", " ran"], [False, True, True, False]) == "a<< big dog>> ran"
    assert highlight(["x", "y"], [False, True]) == "x<<y>>"
    system, user = fuzzing_messages("dogs", ["a<< dog>>"])
    assert system["content"].endswith(
        "highlighted between << and >>. Some texts are highlighted wrongly. You decide, for each text, whether every "
        "highlighted token is one on which the feature, as explained, fires."
    )
    assert user["content"] == (
        "Explanation of the feature: dogs\n\n"
        "Text 1:\na<< dog>>\n\n"
        "For each of the 1 texts, answer 1 if every highlighted token is one the feature fires on, and 0 if any highlighted\n"
        "token is not. Reply with a JSON array of exactly 1 integers (0 or 1), in order, and nothing else."
    )


def test_cosy_and_complexity_prompts_golden() -> None:
    (user,) = cosy_messages("dogs", 3)
    assert user["content"] == (
        "Write 3 different short texts (one or two sentences each) that clearly include the following concept:\n"
        "dogs\n\n"
        "Write exactly 3 lines, one text per line, with no numbering, no quotes and no blank lines."
    )
    # The paper setting: as the reference, texts of a fixed number of words (512), one per line, the concept last.
    (user,) = cosy_messages("dogs", 10, words=512)
    assert user["content"] == (
        "Write 10 texts of 512 words each. Put each text on a single line, one text per line, and add nothing else: "
        "no formatting, no introduction, no explanation. Every text must stand on its own as one sample that could "
        "be stored as a row of a text file. The texts should include:\ndogs"
    )
    (user,) = complexity_messages(['"dog"', "animals"])
    assert user["content"].endswith(
        'Rules:\n1. "dog"\n2. animals\n\n'
        "Reply with a JSON array of exactly 2 integers between 0 and 5, one per rule in order, and nothing else."
    )
