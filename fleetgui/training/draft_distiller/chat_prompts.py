"""Chat and code questions written programmatically, for distilling a draft of a chat model.

Each question is a template filled with a subject (``"How do I {}?"`` with ``"cook rice"``).
Every fifth subject of each list is held out: :func:`make_prompts` with ``heldout=True`` only
uses those, so the held-out questions are about things the draft never saw in training, not
just rephrasings of them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

#: Every ``HOLDOUT_EVERY``-th subject of a list is kept for measuring.
HOLDOUT_EVERY = 5

COUNTRIES = (
    "France", "Japan", "Brazil", "Canada", "Egypt", "Australia", "India", "Italy", "Kenya",
    "Mexico", "Norway", "Peru", "Spain", "Germany", "Argentina", "Vietnam", "Greece", "Chile",
    "Poland", "Thailand", "Portugal", "Morocco", "Sweden", "Turkey", "Ireland",
)  # fmt: skip
TOPICS = (
    "the Roman Empire", "the Moon", "honey bees", "volcanoes", "the Great Wall of China",
    "penguins", "the Amazon rainforest", "the printing press", "coral reefs", "the Olympic Games",
    "dinosaurs", "the Eiffel Tower", "the Silk Road", "Mars", "octopuses", "the Renaissance",
    "the Sahara desert", "whales", "the Industrial Revolution", "tea", "the human heart",
    "glaciers", "Leonardo da Vinci", "the Pyramids of Giza", "hummingbirds",
)  # fmt: skip
CONCEPTS = (
    "photosynthesis", "gravity", "inflation", "machine learning", "the water cycle", "DNA",
    "black holes", "vaccines", "democracy", "electricity", "climate change", "evolution",
    "the internet", "compound interest", "encryption", "the immune system", "plate tectonics",
    "supply and demand", "quantum computing", "nuclear energy", "recycling", "the stock market",
    "antibiotics", "artificial intelligence", "renewable energy",
)  # fmt: skip
WHYS = (
    "the sky is blue", "leaves change color in autumn", "we have seasons", "ice floats on water",
    "the ocean is salty", "we need sleep", "cats purr", "bread rises", "we dream",
    "the Moon has phases", "onions make us cry", "birds migrate", "metal feels cold",
    "we get goosebumps", "the sea has tides", "stars twinkle", "coffee keeps us awake",
    "we yawn", "planes can fly", "rainbows form", "the Earth is round", "bees make honey",
    "we have fingerprints", "soap cleans", "thunder follows lightning",
)  # fmt: skip
PAIRS = (
    ("weather", "climate"), ("a virus", "a bacterium"), ("RAM", "storage"),
    ("a comet", "an asteroid"), ("a crocodile", "an alligator"), ("speed", "velocity"),
    ("a lake", "a pond"), ("baking soda", "baking powder"), ("a frog", "a toad"),
    ("an ocean", "a sea"), ("a democracy", "a republic"), ("a meteor", "a meteorite"),
    ("a rabbit", "a hare"), ("an emulsion", "a solution"), ("a hurricane", "a tornado"),
    ("a CPU", "a GPU"), ("mass", "weight"), ("a dolphin", "a porpoise"),
    ("a loan", "a mortgage"), ("an atom", "a molecule"),
)  # fmt: skip
TASKS = (
    "cook rice", "learn a new language", "improve my sleep", "save money", "start running",
    "write a cover letter", "plant tomatoes", "clean a laptop keyboard",
    "prepare for a job interview", "make a cup of tea", "change a bike tire",
    "stay focused while studying", "organize my desk", "bake bread", "start meditating",
    "reduce stress", "back up my computer", "train a puppy", "write a good email",
    "make new friends", "grow herbs indoors", "give a presentation", "read more books",
    "drink more water", "plan a trip",
)  # fmt: skip
THINGS = (
    "book", "movie", "season", "food", "color", "hobby", "animal", "city", "sport",
    "board game", "song", "fruit", "holiday", "dessert", "painting",
)  # fmt: skip
MOODS = (
    "tired", "happy", "bored", "nervous", "stressed", "excited", "lonely", "curious",
    "motivated", "sad",
)  # fmt: skip
POEM_TOPICS = (
    "the sea", "autumn", "a cat", "the city at night", "friendship", "the mountains",
    "coffee", "the rain", "spring", "the stars",
)  # fmt: skip
GREETINGS = (
    "Hi! How are you today?", "Hello, who are you?", "Good morning! What can you do?",
    "Hey, can you help me with something?", "Thanks for your help yesterday!",
    "What do you like to talk about?", "Can you tell me something interesting?",
    "I just got a new job!", "What should I do this weekend?", "Do you have any hobbies?",
)  # fmt: skip
FUNCTION_TASKS = (
    "reverses a string", "checks whether a number is prime", "returns the factorial of n",
    "computes the n-th Fibonacci number", "counts the vowels in a string",
    "removes duplicates from a list", "merges two sorted lists",
    "finds the largest element of a list", "checks if a string is a palindrome",
    "converts Celsius to Fahrenheit", "sums the digits of an integer", "flattens a nested list",
    "sorts a list of dictionaries by a key", "counts the words in a text file",
    "returns the second largest number in a list",
    "computes the greatest common divisor of two numbers",
    "checks whether an email address looks valid", "capitalizes every word of a sentence",
    "returns the even numbers of a list", "computes the average of a list of numbers",
    "checks whether two strings are anagrams", "implements binary search",
    "transposes a matrix", "counts how often each word occurs in a sentence",
    "converts a decimal number to binary", "finds the common elements of two lists",
    "returns the longest word in a sentence", "rotates a list by k positions",
    "checks whether a year is a leap year", "computes the power set of a list",
)  # fmt: skip
PY_HOWTOS = (
    "read a CSV file", "sort a dictionary by value", "handle exceptions", "write to a file",
    "use a list comprehension", "define a class", "format a date", "parse JSON",
    "generate random numbers", "reverse a list", "merge two dictionaries",
    "iterate over a dictionary",
    "measure how long code takes", "remove whitespace from a string", "split a string",
    "check if a key is in a dictionary", "create a virtual environment", "read user input",
    "copy a list", "count items in a list", "join a list of strings", "round a number",
    "get the current date", "delete a file", "find the index of an item in a list",
)  # fmt: skip
PY_FEATURES = (
    "decorator", "generator", "list comprehension", "lambda function", "context manager",
    "dictionary", "tuple", "set", "class", "module", "f-string", "exception",
    "virtual environment", "iterator", "keyword argument",
)  # fmt: skip
CLASS_TASKS = (
    "represents a bank account with deposit and withdraw methods", "implements a stack",
    "implements a queue", "stores a to-do list", "represents a rectangle and computes its area",
    "counts how many times it was called", "represents a point in 2D space",
    "keeps the high scores of a game", "implements a simple timer", "represents a playing card",
)  # fmt: skip
SNIPPETS = (
    "def add(a, b):\n    return a + b",
    "squares = [x * x for x in range(10)]",
    "for i, name in enumerate(names):\n    print(i, name)",
    "with open('data.txt') as f:\n    lines = f.readlines()",
    "total = sum(n for n in numbers if n % 2 == 0)",
    "def greet(name='world'):\n    return f'Hello, {name}!'",
    "counts = {}\nfor word in words:\n    counts[word] = counts.get(word, 0) + 1",
    "class Dog:\n    def __init__(self, name):\n        self.name = name",
    "try:\n    value = int(text)\nexcept ValueError:\n    value = 0",
    "pairs = sorted(items.items(), key=lambda kv: kv[1])",
)  # fmt: skip

#: (template, subjects) of chat questions: facts, how-to, explanations and small talk.
CHAT_TEMPLATES: tuple[tuple[str, Sequence[object]], ...] = (
    ("What is the capital of {}?", COUNTRIES),
    ("What language is spoken in {}?", COUNTRIES),
    ("What is {} famous for?", COUNTRIES),
    ("Tell me about {}.", TOPICS),
    ("Give me three interesting facts about {}.", TOPICS),
    ("Explain {} in simple terms.", CONCEPTS),
    ("What is {}?", CONCEPTS),
    ("Why is {} important?", CONCEPTS),
    ("Why {}?", WHYS),
    ("Can you explain why {}?", WHYS),
    ("What is the difference between {} and {}?", PAIRS),
    ("How do I {}?", TASKS),
    ("What is the best way to {}?", TASKS),
    ("Give me some tips to {}.", TASKS),
    ("What's your favorite {}?", THINGS),
    ("Can you recommend a good {}?", THINGS),
    ("I'm feeling {} today. Any advice?", MOODS),
    ("Write a short poem about {}.", POEM_TOPICS),
    ("{}", GREETINGS),
)
#: (template, subjects) of code questions about Python.
CODE_TEMPLATES: tuple[tuple[str, Sequence[object]], ...] = (
    ("Write a Python function that {}.", FUNCTION_TASKS),
    ("Can you write a Python function that {}?", FUNCTION_TASKS),
    ("Show me Python code that {}.", FUNCTION_TASKS),
    ("Implement a Python function that {}, with a docstring.", FUNCTION_TASKS),
    ("Write a Python class that {}.", CLASS_TASKS),
    ("How do I {} in Python?", PY_HOWTOS),
    ("What is the easiest way to {} in Python?", PY_HOWTOS),
    ("What is a {} in Python? Show an example.", PY_FEATURES),
    ("Explain what this Python code does:\n```python\n{}\n```", SNIPPETS),
)

KINDS: tuple[str, ...] = ("chat", "code")


@dataclass(frozen=True)
class Question:
    """One user message and its kind (``chat`` or ``code``)."""

    kind: str
    text: str


def _fill(template: str, subject: object) -> str:
    return template.format(*subject) if isinstance(subject, tuple) else template.format(subject)


def all_questions(kind: str, heldout: bool) -> list[Question]:
    """Every question of ``kind`` over the training subjects, or over the held-out ones."""
    if kind not in KINDS:
        raise ValueError(f"unknown question kind {kind!r}; choose one of {', '.join(KINDS)}")
    templates = CHAT_TEMPLATES if kind == "chat" else CODE_TEMPLATES
    questions = []
    for template, subjects in templates:
        for index, subject in enumerate(subjects):
            if (index % HOLDOUT_EVERY == HOLDOUT_EVERY - 1) == heldout:
                questions.append(Question(kind, _fill(template, subject)))
    return questions


def make_prompts(count: int, code_fraction: float, seed: int, heldout: bool) -> list[Question]:
    """``count`` distinct questions, ``code_fraction`` of them about Python, in a seeded order.

    Raises ``ValueError`` when there are fewer distinct questions than asked for."""
    n_code = round(count * code_fraction)
    picked: list[Question] = []
    rng = random.Random(seed)
    for kind, n in (("chat", count - n_code), ("code", n_code)):
        pool = all_questions(kind, heldout)
        if n > len(pool):
            raise ValueError(
                f"asked for {n} {kind} questions, there are {len(pool)} "
                f"({'held-out' if heldout else 'training'} subjects)"
            )
        picked.extend(rng.sample(pool, n))
    rng.shuffle(picked)
    return picked
