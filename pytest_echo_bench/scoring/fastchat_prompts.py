"""FastChat's MT-bench judge prompts as its ``judge_prompts.jsonl`` has them: the single-answer
templates ``single-v1`` and ``single-math-v1`` (with a reference answer), and ``pair-v2``.

Copied from FastChat (lm-sys/FastChat, ``fastchat/llm_judge/data/judge_prompts.jsonl``),
Copyright the FastChat authors, licensed under the Apache License 2.0. Kept byte for byte: a
replay of GPT-4's recorded judgments finds each one by the exact prompt rendered from these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JudgePrompt:
    """One FastChat judge prompt: the system text and the template its fields fill."""

    name: str
    system: str
    template: str  # str.format fields: question, answer (answer_a, answer_b), ref_answer_1

    def render(self, **fields: str) -> str:
        """The prompt as FastChat renders it: ``template.format(**fields)``."""
        return self.template.format(**fields)


SINGLE_V1 = JudgePrompt(
    "single-v1",
    "You are a helpful assistant.",
    (
        "[Instruction]\n"
        "Please act as an impartial judge and evaluate the quality of the response provided by "
        "an AI assistant to the user question displayed below. Your evaluation should consider "
        "factors such as the helpfulness, relevance, accuracy, depth, creativity, and level of "
        "detail of the response. Begin your evaluation by providing a short explanation. Be as "
        "objective as possible. After providing your explanation, you must rate the response on "
        "a scale of 1 to 10 by strictly following this format: \"[[rating]]\", for example: "
        "\"Rating: [[5]]\".\n"
        "\n"
        "[Question]\n"
        "{question}\n"
        "\n"
        "[The Start of Assistant's Answer]\n"
        "{answer}\n"
        "[The End of Assistant's Answer]"
    ),
)

SINGLE_MATH_V1 = JudgePrompt(
    "single-math-v1",
    "You are a helpful assistant.",
    (
        "[Instruction]\n"
        "Please act as an impartial judge and evaluate the quality of the response provided by "
        "an AI assistant to the user question displayed below. Your evaluation should consider "
        "correctness and helpfulness. You will be given a reference answer and the assistant's "
        "answer. Begin your evaluation by comparing the assistant's answer with the reference "
        "answer. Identify and correct any mistakes. Be as objective as possible. After providing "
        "your explanation, you must rate the response on a scale of 1 to 10 by strictly "
        "following this format: \"[[rating]]\", for example: \"Rating: [[5]]\".\n"
        "\n"
        "[Question]\n"
        "{question}\n"
        "\n"
        "[The Start of Reference Answer]\n"
        "{ref_answer_1}\n"
        "[The End of Reference Answer]\n"
        "\n"
        "[The Start of Assistant's Answer]\n"
        "{answer}\n"
        "[The End of Assistant's Answer]"
    ),
)

PAIR_V2 = JudgePrompt(
    "pair-v2",
    (
        "Please act as an impartial judge and evaluate the quality of the responses provided by "
        "two AI assistants to the user question displayed below. You should choose the assistant "
        "that follows the user's instructions and answers the user's question better. Your "
        "evaluation should consider factors such as the helpfulness, relevance, accuracy, depth, "
        "creativity, and level of detail of their responses. Begin your evaluation by comparing "
        "the two responses and provide a short explanation. Avoid any position biases and ensure "
        "that the order in which the responses were presented does not influence your decision. "
        "Do not allow the length of the responses to influence your evaluation. Do not favor "
        "certain names of the assistants. Be as objective as possible. After providing your "
        "explanation, output your final verdict by strictly following this format: \"[[A]]\" if "
        "assistant A is better, \"[[B]]\" if assistant B is better, and \"[[C]]\" for a tie."
    ),
    (
        "[User Question]\n"
        "{question}\n"
        "\n"
        "[The Start of Assistant A's Answer]\n"
        "{answer_a}\n"
        "[The End of Assistant A's Answer]\n"
        "\n"
        "[The Start of Assistant B's Answer]\n"
        "{answer_b}\n"
        "[The End of Assistant B's Answer]"
    ),
)

PROMPTS = {p.name: p for p in (SINGLE_V1, SINGLE_MATH_V1, PAIR_V2)}
